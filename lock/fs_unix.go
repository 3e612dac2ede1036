//go:build unix

package lock

import (
	"errors"
	"os"
	"syscall"
)

// openRecord opens a lock file for reading without following a symbolic link
// at its path and without blocking on a FIFO.
func openRecord(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil && errors.Is(err, syscall.ELOOP) {
		return nil, &os.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	return f, err
}

// renameNoReplace moves oldpath to newpath only if newpath does not exist,
// failing with an error satisfying errors.Is(err, fs.ErrExist) otherwise. A
// hard link is atomic about that; where the filesystem has no hard links it
// falls back to a check followed by a rename.
func renameNoReplace(oldpath, newpath string) error {
	err := os.Link(oldpath, newpath)
	switch {
	case err == nil:
		return os.Remove(oldpath)
	case errors.Is(err, os.ErrExist):
		return err
	}
	if _, serr := os.Lstat(newpath); serr == nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: os.ErrExist}
	}
	return os.Rename(oldpath, newpath)
}

// openGuard opens (creating it if needed) the guard sidecar for reading
// and writing, refusing a symbolic link or anything but a regular file at
// its path: the guard is written to (the queue's counter), and a link
// planted there must not make gpuexec write through it.
func openGuard(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o666)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, &os.PathError{Op: "open", Path: path, Err: ErrNotRegular}
		}
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	return f, nil
}
