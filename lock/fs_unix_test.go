//go:build unix

package lock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/lock/internal/osfile"
)

// Files gpuexec creates are writable by the folder's group where the group
// may write the folder, never by others, whatever the umask. Not parallel:
// the umask is the process's.
func TestCreatedFilesFollowTheFolder(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for _, tt := range []struct {
		folder os.FileMode
		want   os.FileMode
	}{
		{os.ModeSetgid | 0o775, 0o664},
		{0o755, 0o644},
		{0o777, 0o664},
		{0o770, 0o664},
		{os.ModeSticky | 0o777, 0o644},
	} {
		dir := filepath.Join(t.TempDir(), "locks")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, tt.folder); err != nil {
			t.Fatal(err)
		}
		lock := filepath.Join(dir, "gpu.lock")
		h, err := TryAcquire(Options{Path: lock, Owner: "o", Slug: "s"})
		if h == nil || err != nil {
			t.Fatalf("TryAcquire: %v, %v", h, err)
		}
		for _, p := range []string{lock, lock + guardSuffix} {
			if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != tt.want {
				t.Errorf("folder %v: %s is %v (%v), want %v", tt.folder, filepath.Base(p), fi.Mode().Perm(), err, tt.want)
			}
		}
		// Whose kernel lock says a holder lives: the group may probe it,
		// nobody else may open it (and take that lock).
		if fi, err := os.Stat(h.LiveFiles()[0].Name()); err != nil || fi.Mode().Perm() != 0o640 {
			t.Errorf("folder %v: the liveness file is %v (%v), want 0640", tt.folder, fi.Mode().Perm(), err)
		}
		h.Release()
	}
}

// Opens in the lock's folder refuse links, FIFOs and folders at once.
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
				f, err := osfile.OpenRegular(p, write)
				if err == nil {
					f.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, ErrNotRegular) && !(p == dir && write) {
					t.Errorf("osfile.OpenRegular(%s, %v) = %v, want ErrNotRegular", filepath.Base(p), write, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("osfile.OpenRegular(%s, %v) blocked", filepath.Base(p), write)
			}
		}
	}
	for _, p := range []string{fifo, link} {
		if _, _, err := osfile.OpenGuard(p); !errors.Is(err, ErrNotRegular) {
			t.Errorf("osfile.OpenGuard(%s) = %v, want ErrNotRegular", filepath.Base(p), err)
		}
	}
	// A probe of a liveness "file" that is a FIFO cannot tell, and does
	// not wait.
	if held, known, _ := probeLiveFile(fifo); held || known {
		t.Errorf("probeLiveFile(FIFO) = %v, %v; want unknown", held, known)
	}
	_ = context.Background
}

// A heartbeat changes the file it found to be ours, through the open file.
func TestTouchFileThroughTheOpenFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := osfile.OpenRegular(p, false)
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
	if err := osfile.Touch(f, when); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(moved); !fi.ModTime().Equal(when) {
		t.Errorf("the open file's mtime is %v, want %v", fi.ModTime(), when)
	}
	if fi, _ := os.Stat(p); !fi.ModTime().Equal(old.Truncate(time.Microsecond)) && fi.ModTime().After(old.Add(time.Second)) {
		t.Errorf("the file now at the path was touched: %v", fi.ModTime())
	}
}
