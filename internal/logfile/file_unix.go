//go:build unix

package logfile

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
)

// openSidecar opens (creating) the sidecar whose lock the writers take, as
// openFile opens the log. It is created for its owner alone (0600), so that
// nobody else can take its lock; one that others may open (made by an older
// gpuexec) is tightened, if it is the caller's, and refused otherwise, as
// is one with other names.
func openSidecar(path string) (*os.File, error) {
	f, fi, err := openFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		f.Close()
		return nil, fmt.Errorf("%s: cannot tell its owner", path)
	}
	switch {
	case int(st.Uid) != os.Geteuid():
		f.Close()
		return nil, fmt.Errorf("%s belongs to another user (uid %d), who could take its lock; remove it", path, st.Uid)
	case st.Nlink != 1:
		f.Close()
		return nil, fmt.Errorf("%s: not a file of its own (it has %d names); remove it", path, st.Nlink)
	case fi.Mode().Perm()&0o077 != 0:
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s may be opened by others (%v), who could take its lock: %w", path, fi.Mode(), err)
		}
	}
	return f, nil
}

// identity is what tells the file f, whose state is fi, from any other
// while it exists (its device and inode), and how many names it has.
func identity(f *os.File, fi fs.FileInfo) (string, uint64, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", 0, fmt.Errorf("%s: cannot tell its identity", f.Name())
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino), uint64(st.Nlink), nil
}

// lockWithin takes an exclusive flock on f, waiting at most d (ErrBusy).
// The wait is the kernel's, so that the lock goes to the waiters in the
// kernel's order. On ErrBusy f is no longer the caller's: the wait goes on
// in the background until the lock is had, and then lets go of it and
// closes f, so that a writer that gave up never keeps the others waiting.
func lockWithin(f *os.File, d time.Duration) error {
	if ok, err := osfile.TryLock(f); ok || err != nil {
		return err // free, or failed: no wait to bound
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, gaveUp, err := osfile.WaitLock(ctx, f)
	if gaveUp {
		return ErrBusy
	}
	return err
}

func unlockFile(f *os.File) error { return osfile.Unlock(f) }
