//go:build unix

package logfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// openAppend opens the log at path for appending, creating it with perm
// (as the umask has it) if missing, and returns it with its state. It never
// follows a symbolic link at path (O_NOFOLLOW) nor waits on a FIFO
// (O_NONBLOCK), and refuses anything but a regular file.
func openAppend(path string, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	return open(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, perm)
}

// openSidecar opens (creating) the sidecar whose lock the writers take, as
// openAppend opens the log.
func openSidecar(path string) (*os.File, error) {
	f, _, err := open(path, os.O_RDONLY|os.O_CREATE, 0o644)
	return f, err
}

func open(path string, flag int, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, perm)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EMLINK) || errors.Is(err, unix.ENXIO) {
			return nil, nil, fmt.Errorf("%s: not a regular file", path)
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
		return nil, nil, fmt.Errorf("%s: not a regular file", path)
	}
	return f, fi, nil
}

// lockFile takes an exclusive flock on f, waiting in the kernel.
func lockFile(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func unlockFile(f *os.File) error { return unix.Flock(int(f.Fd()), unix.LOCK_UN) }
