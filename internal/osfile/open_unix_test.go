//go:build unix

package osfile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Opens refuse links, FIFOs and folders at once.
func TestOpenRegularRefusesAtOnce(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, link, dir} {
		for _, write := range []bool{false, true} {
			done := make(chan error, 1)
			go func() {
				f, err := OpenRegular(p, write)
				if err == nil {
					f.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, ErrNotRegular) && !(p == dir && write) {
					t.Errorf("OpenRegular(%s, %v) = %v, want ErrNotRegular", filepath.Base(p), write, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("OpenRegular(%s, %v) blocked", filepath.Base(p), write)
			}
		}
	}
	for _, p := range []string{fifo, link, dir} {
		for _, flag := range []int{os.O_WRONLY | os.O_APPEND, os.O_WRONLY | os.O_APPEND | os.O_CREATE} {
			done := make(chan error, 1)
			go func() {
				f, _, err := OpenFile(p, flag, 0o644)
				if err == nil {
					f.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, ErrNotRegular) {
					t.Errorf("OpenFile(%s, %#x) = %v, want ErrNotRegular", filepath.Base(p), flag, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("OpenFile(%s, %#x) blocked", filepath.Base(p), flag)
			}
		}
	}
	for _, p := range []string{fifo, link} {
		if _, _, err := OpenGuard(p); !errors.Is(err, ErrNotRegular) {
			t.Errorf("OpenGuard(%s) = %v, want ErrNotRegular", filepath.Base(p), err)
		}
	}
}

// A heartbeat changes the file it found to be ours, through the open file.
func TestTouchFileThroughTheOpenFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := OpenRegular(p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The path now names another file; the open one is touched.
	moved := filepath.Join(dir, "moved")
	if err := os.Rename(p, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(p, old, old)
	when := time.Now().Add(-time.Minute).Truncate(time.Second)
	if err := Touch(f, when); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(moved); !fi.ModTime().Equal(when) {
		t.Errorf("the open file's mtime is %v, want %v", fi.ModTime(), when)
	}
	if fi, _ := os.Stat(p); !fi.ModTime().Equal(old.Truncate(time.Microsecond)) && fi.ModTime().After(old.Add(time.Second)) {
		t.Errorf("the file now at the path was touched: %v", fi.ModTime())
	}
}
