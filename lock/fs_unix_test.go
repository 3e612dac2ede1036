//go:build unix

package lock

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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

// A probe of a liveness "file" that is a FIFO cannot tell, and does not
// wait.
func TestProbeOfAFIFOIsUnknown(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan bool, 1)
	go func() {
		held, known, _ := probeLiveFile(fifo)
		done <- held || known
	}()
	select {
	case bad := <-done:
		if bad {
			t.Error("probeLiveFile(FIFO) claims to know; want unknown")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("probeLiveFile(FIFO) blocked")
	}
}

// A live waiter's ticket that this process cannot open (no descriptor
// left: EMFILE; ENFILE and EACCES take the same path) is not taken for a
// dead one. Not parallel: the limit is the process's.
func TestTicketThatCannotBeOpenedIsAlive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock"+ticketSuffix+"00000000000000000001")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	// The lowest descriptor free now: no open succeeds under it.
	free, err := syscall.Dup(0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(free)
	low := old
	low.Cur = uint64(free)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	alive := ticketAlive(path)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if !alive {
		t.Error("a live ticket that could not be opened (EMFILE) was taken for a dead one")
	}
	if !ticketAlive(path) {
		t.Error("a live ticket is taken for a dead one")
	}
}
