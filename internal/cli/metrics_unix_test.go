//go:build unix

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// --textfile refuses a symbolic link and a FIFO with one line and status
// 125, leaving them as they are (a FIFO is never opened: no hang).
func TestMetricsTextfileRefusals(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	dir := t.TempDir()
	target := writeFile(t, filepath.Join(dir, "target"), "kept")
	link := filepath.Join(dir, "link.prom")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.prom")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for path, why := range map[string]string{link: "symbolic link", fifo: "not a regular file"} {
		r := gx(t, nil, "metrics", "--lock", lock, "--textfile", path)
		wantCode(t, r, 125)
		if len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, why) {
			t.Errorf("--textfile %s: stderr:\n%s", path, r.stderr)
		}
		if fi, err := os.Lstat(path); err != nil || fi.Mode().IsRegular() {
			t.Errorf("%s replaced: %v %v", path, fi, err)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "kept" {
		t.Errorf("the link's target holds %q", b)
	}
}
