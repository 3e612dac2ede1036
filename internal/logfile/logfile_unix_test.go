//go:build unix

package logfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A link or a FIFO at the log's path, or at its sidecar's, is refused,
// never followed or waited on.
func TestRefusesNonRegular(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(path string) error
	}{
		{"link", func(p string) error { return os.Symlink(filepath.Join(filepath.Dir(p), "elsewhere"), p) }},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"folder", func(p string) error { return os.Mkdir(p, 0o755) }},
	} {
		for _, at := range []string{"log", "sidecar"} {
			t.Run(tc.name+" at the "+at, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "gpuexec.log")
				p := path
				if at == "sidecar" {
					p += LockSuffix
				}
				if err := tc.make(p); err != nil {
					t.Fatal(err)
				}
				if f, err := Open(path, Options{}); err == nil {
					f.Close()
					t.Fatalf("Open succeeded with a %s at the %s", tc.name, at)
				}
				if _, err := os.Lstat(filepath.Join(dir, "elsewhere")); err == nil {
					t.Error("the link was followed")
				}
			})
		}
	}
}
