//go:build unix

package lock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Files gpuexec creates follow the folder, whatever the umask: in a group
// folder (setgid) 0660, a holder's liveness file 0640 (only its owner
// writes its noted job group), in a private one 0600 whatever its group
// may do (an older gpuexec made the default folder 0755 in its creator's
// primary group), in a sticky folder every user may write 0644, so that
// anyone may probe them. Nobody outside the folder's
// group may open them. Not parallel: the umask is the process's.
func TestCreatedFilesFollowTheFolder(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for _, tt := range []struct {
		folder     os.FileMode
		want, live os.FileMode
	}{
		{os.ModeSetgid | 0o775, 0o660, 0o640},
		{os.ModeSetgid | 0o770, 0o660, 0o640},
		{0o755, 0o600, 0o600},
		{0o750, 0o600, 0o600},
		{0o711, 0o600, 0o600},
		{0o700, 0o600, 0o600},
		{os.ModeSticky | 0o777, 0o644, 0o644},
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
		if fi, err := os.Stat(h.LiveFiles()[0].Name()); err != nil || fi.Mode().Perm() != tt.live {
			t.Errorf("folder %v: the liveness file is %v (%v), want %v", tt.folder, fi.Mode().Perm(), err, tt.live)
		}
		h.Release()
	}
}

// A folder its group may write without setgid is refused, and nothing is
// made in it.
func TestGroupFolderWithoutSetgid(t *testing.T) {
	for _, mode := range []os.FileMode{0o775, 0o770, os.ModeSticky | 0o775} {
		dir := filepath.Join(t.TempDir(), "locks")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		lock := filepath.Join(dir, "gpu.lock")
		h, err := TryAcquire(Options{Path: lock, Owner: "o", Slug: "s"})
		var fe *FolderError
		if h != nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), "chmod g+s "+dir) {
			t.Errorf("folder %v: TryAcquire = %v, %v; want a FolderError with the recipe", mode, h, err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("folder %v: %d files made in it", mode, len(ents))
		}
	}
}

// A folder every user may write that is not sticky is refused, setgid or
// not (anyone could remove or replace the lock's files, or make a guard
// open to all and hold it), and nothing is made in it.
func TestFolderOpenToAllWithoutStickyIsRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o777, os.ModeSetgid | 0o777, 0o773} {
		dir := filepath.Join(t.TempDir(), "locks")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		lock := filepath.Join(dir, "gpu.lock")
		h, err := TryAcquire(Options{Path: lock, Owner: "o", Slug: "s"})
		var fe *FolderError
		if h != nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), "chmod o-w "+dir) || !strings.Contains(err.Error(), "chmod +t "+dir) {
			t.Errorf("folder %v: TryAcquire = %v, %v; want a FolderError with the fixes", mode, h, err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("folder %v: %d files made in it", mode, len(ents))
		}
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
