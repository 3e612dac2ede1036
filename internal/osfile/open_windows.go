//go:build windows

package osfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"
)

// Every file in the lock's folder may have been put there by another user:
// the opens here never follow a symbolic link or other reparse point at the
// path, and refuse anything but a regular file before a byte is read from
// it or written to it. Handles share read, write and delete access, as
// Node (libuv) does: os.Open does not share delete, and while it held the
// file open another process's rename or delete of the lock (a release, a
// stale clearing, the seed's Node tool's) would fail with a sharing
// violation; a file that is removed while still open and locked (a
// liveness file, a queue ticket) must be open that way even for its own
// process.

// OpenFile opens the file at path with flag (as os.OpenFile takes it),
// creating it where flag says so, and returns it with its state; perm is
// Unix's (the folder's inherited ACL decides who may open the file).
// Anything at path but a regular file (a symbolic link or other reparse
// point, a folder, a device, a named pipe) is refused with ErrNotRegular,
// never followed. O_APPEND is kept by moving to the end at the open: a
// handle opened for appending alone could not be truncated, so the caller
// must keep the end its end (write under a lock).
func OpenFile(path string, flag int, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	var access uint32
	switch flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR) {
	case os.O_RDONLY:
		access = windows.GENERIC_READ
	case os.O_WRONLY:
		access = windows.GENERIC_WRITE
	case os.O_RDWR:
		access = windows.GENERIC_READ | windows.GENERIC_WRITE
	}
	var disposition uint32
	switch {
	case flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
		disposition = windows.CREATE_NEW
	case flag&(os.O_CREATE|os.O_TRUNC) == os.O_CREATE|os.O_TRUNC:
		disposition = windows.CREATE_ALWAYS
	case flag&os.O_CREATE != 0:
		disposition = windows.OPEN_ALWAYS
	case flag&os.O_TRUNC != 0:
		disposition = windows.TRUNCATE_EXISTING
	default:
		disposition = windows.OPEN_EXISTING
	}
	f, err := createFile(path, access, disposition)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if flag&os.O_APPEND != 0 {
		if _, err := f.Seek(0, io.SeekEnd); err != nil {
			f.Close()
			return nil, nil, err
		}
	}
	return f, fi, nil
}

// OpenRegular opens the existing regular file at path, for reading and
// also for writing with write. Anything else at path (a symbolic link or
// other reparse point, a folder, a device) is refused with ErrNotRegular:
// the handle is opened on the link itself (FILE_FLAG_OPEN_REPARSE_POINT),
// never on its target, and checked.
func OpenRegular(path string, write bool) (*os.File, error) {
	access := uint32(windows.GENERIC_READ)
	if write {
		access |= windows.GENERIC_WRITE
	}
	return createFile(path, access, windows.OPEN_EXISTING)
}

// CreateExcl creates the file at path, which must not exist (CREATE_NEW: a
// link there counts as existing), for reading and writing.
func CreateExcl(path string, _ Kind) (*os.File, error) {
	return createFile(path, windows.GENERIC_READ|windows.GENERIC_WRITE, windows.CREATE_NEW)
}

// createFile is CreateFile with the share modes and checks above.
func createFile(path string, access, disposition uint32) (*os.File, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	h, err := windows.CreateFile(p, access,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE, nil,
		disposition, windows.FILE_FLAG_OPEN_REPARSE_POINT|windows.FILE_FLAG_BACKUP_SEMANTICS, 0)
	if err != nil {
		if errors.Is(err, windows.ERROR_PATH_NOT_FOUND) && underFile(path) {
			err = errUnderFile
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	// A device (NUL, a console) or a named pipe is no file on a disk:
	// refused before anything else asks it a question.
	if t, err := windows.GetFileType(h); err == nil && t != windows.FILE_TYPE_DISK {
		windows.CloseHandle(h)
		return nil, &os.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	var fi windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(h, &fi); err != nil {
		windows.CloseHandle(h)
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if fi.FileAttributes&(windows.FILE_ATTRIBUTE_REPARSE_POINT|windows.FILE_ATTRIBUTE_DIRECTORY|windows.FILE_ATTRIBUTE_DEVICE) != 0 {
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

// OpenGuard opens the guard sidecar at path for reading and writing,
// creating it if missing. Windows has no per-user write bits on files in a
// shared folder that a umask would take away, so it is always writable.
func OpenGuard(path string) (f *os.File, writable bool, err error) {
	for range 4 { // a few rounds: each loses only to another process creating or removing it
		f, err = OpenRegular(path, true)
		if !errors.Is(err, fs.ErrNotExist) {
			return f, err == nil, err
		}
		f, err = CreateExcl(path, Shared)
		if !errors.Is(err, fs.ErrExist) {
			return f, err == nil, err
		}
	}
	return nil, false, err
}

// OpenToTouch opens the regular file at path to read it and set its times
// (Touch): SetFileTime needs FILE_WRITE_ATTRIBUTES, which, unlike
// writing data, no reader's share mode refuses (PowerShell's Get-Content
// shares reading only).
func OpenToTouch(path string) (*os.File, error) {
	return createFile(path, windows.GENERIC_READ|windows.FILE_WRITE_ATTRIBUTES, windows.OPEN_EXISTING)
}
