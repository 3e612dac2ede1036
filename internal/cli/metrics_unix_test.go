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

// --textfile replaces a file that is there with the metrics as printed,
// 0644 whatever the file's mode was, through a rename: no temporary file
// is left beside it.
func TestMetricsTextfileReplaces(t *testing.T) {
	t.Parallel()
	_, lock := lockInFolder(t)
	dir := t.TempDir()
	target := writeFile(t, filepath.Join(dir, "gpuexec.prom"), "old\n")
	if err := os.Chmod(target, 0o600); err != nil {
		t.Fatal(err)
	}
	printed := gx(t, nil, "metrics", "--lock", lock)
	wantCode(t, printed, 0)
	r := gx(t, nil, "metrics", "--lock", lock, "--textfile", target)
	wantCode(t, r, 0)
	if r.stdout != "" || r.stderr != "" {
		t.Errorf("stdout %q, stderr %q", r.stdout, r.stderr)
	}
	b, err := os.ReadFile(target)
	if err != nil || string(b) != printed.stdout {
		t.Errorf("the file holds %q (%v), want what metrics prints:\n%s", b, err, printed.stdout)
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v (%v), want 0644", fi.Mode(), err)
	}
	if es, err := os.ReadDir(dir); err != nil || len(es) != 1 {
		t.Errorf("the folder holds %v (%v), want gpuexec.prom alone", es, err)
	}
}
