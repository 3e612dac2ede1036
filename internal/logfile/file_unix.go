//go:build unix

package logfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// openFile opens the file at path with flag, creating it with perm (as the
// umask has it) if flag says so, and returns it with its state. It never
// follows a symbolic link at path (O_NOFOLLOW) nor waits on a FIFO
// (O_NONBLOCK); anything but a regular file is errNotRegular.
func openFile(path string, flag int, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, perm)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EMLINK) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.EISDIR) {
			return nil, nil, fmt.Errorf("%s: %w", path, errNotRegular)
		}
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, errNotRegular)
	}
	return f, fi, nil
}

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
// kernel's order, on a duplicate of f's descriptor in a goroutine of its
// own; a wait that outlives d goes on in the background until the lock is
// had, and then closes its duplicate: if f was closed meanwhile (close f
// after ErrBusy), that lets go of the lock at once, as the kernel releases
// a flock with the last descriptor of its open file.
func lockWithin(f *os.File, d time.Duration) error {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		return nil // free: no wait to bound
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		defer unix.Close(fd)
		for {
			err := unix.Flock(fd, unix.LOCK_EX)
			if !errors.Is(err, unix.EINTR) {
				done <- err
				return
			}
		}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return ErrBusy
	}
}

func unlockFile(f *os.File) error { return unix.Flock(int(f.Fd()), unix.LOCK_UN) }
