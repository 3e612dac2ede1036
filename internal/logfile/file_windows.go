//go:build windows

package logfile

import (
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/windows"
)

// openAppend opens the log at path for appending, creating it with perm if
// missing, and returns it with its state. A link or other reparse point, a
// folder or a device (NUL, a named pipe) at path is refused.
func openAppend(path string, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s: not a regular file", path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, perm)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s: not a regular file", path)
	}
	return f, fi, nil
}

// openSidecar opens (creating) the sidecar whose lock the writers take.
func openSidecar(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
}

// lockFile takes an exclusive LockFileEx lock on f's first byte, waiting
// for it: os.OpenFile's handles are synchronous, so LockFileEx returns once
// the lock is had. The sidecar holds no content, so the lock (mandatory on
// Windows) keeps nobody from reading anything.
func lockFile(f *os.File) error {
	return windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK, 0, 1, 0, &windows.Overlapped{})
}

func unlockFile(f *os.File) error {
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, &windows.Overlapped{})
}
