//go:build unix

package osfile

import (
	"errors"
	"os"
)

// RenameNoReplace moves oldpath to newpath only if newpath does not exist,
// failing with an error satisfying errors.Is(err, fs.ErrExist) otherwise. A
// hard link is atomic about that; where the filesystem has no hard links it
// falls back to a check followed by a rename.
func RenameNoReplace(oldpath, newpath string) error {
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
