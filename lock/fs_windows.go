//go:build windows

package lock

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"
)

// openRecord opens a lock file for reading. It shares read, write and delete
// access with other handles, as Node (libuv) does: os.Open does not share
// delete, and while it held the file open another process's rename or
// delete of the lock (a release, a stale clearing, the seed's Node tool's)
// would fail with a sharing violation. It refuses a symbolic link or other
// reparse point at the path: seen by Lstat before opening and, as the path
// may change in between, on the handle, which is opened on the link itself
// (FILE_FLAG_OPEN_REPARSE_POINT), never on its target.
func openRecord(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&(os.ModeSymlink|os.ModeIrregular) != 0 {
		return nil, &os.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	h, err := windows.CreateFile(p, windows.GENERIC_READ,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE, nil,
		windows.OPEN_EXISTING, windows.FILE_FLAG_OPEN_REPARSE_POINT|windows.FILE_FLAG_BACKUP_SEMANTICS, 0)
	if err != nil {
		if errors.Is(err, windows.ERROR_PATH_NOT_FOUND) && underFile(path) {
			err = errUnderFile
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var fi windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(h, &fi); err != nil {
		windows.CloseHandle(h)
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if fi.FileAttributes&windows.FILE_ATTRIBUTE_REPARSE_POINT != 0 {
		windows.CloseHandle(h)
		return nil, &os.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	return os.NewFile(uintptr(h), path), nil
}

// errUnderFile says that a folder of the lock path is a file. Windows
// reports that as "path not found" (which Go's syscall.ENOTDIR is equal
// to), and it must not read as a free lock.
var errUnderFile = errors.New("not a directory: a folder of the path is a file")

// underFile reports whether the nearest existing folder above path is in
// fact a file: Windows then says "path not found", which must not read as
// a free lock (Unix says ENOTDIR).
func underFile(path string) bool {
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err == nil {
			return !fi.IsDir()
		}
		if up := filepath.Dir(dir); up == dir {
			return false
		}
	}
}

// renameNoReplace moves oldpath to newpath only if newpath does not exist:
// MoveFileEx without MOVEFILE_REPLACE_EXISTING.
func renameNoReplace(oldpath, newpath string) error {
	from, err := windows.UTF16PtrFromString(oldpath)
	if err != nil {
		return err
	}
	to, err := windows.UTF16PtrFromString(newpath)
	if err != nil {
		return err
	}
	if err := windows.MoveFileEx(from, to, 0); err != nil {
		if err == windows.ERROR_ALREADY_EXISTS || err == windows.ERROR_FILE_EXISTS {
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: os.ErrExist}
		}
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}

// openGuard opens (creating it if needed) the guard sidecar for reading
// and writing, refusing a symbolic link or anything but a regular file at
// its path: the guard is written to, and a link planted there must not
// make gpuexec write through it.
func openGuard(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, &os.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	return f, nil
}
