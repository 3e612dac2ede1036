//go:build unix

package osfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Every file in the lock's folder may have been put there by another local
// user: the opens here never follow a symbolic link at the path
// (O_NOFOLLOW), never block on a FIFO or a device (O_NONBLOCK), and refuse
// anything but a regular file before a byte is read from it or written to
// it. For a regular file O_NONBLOCK changes nothing.

// OpenRegular opens the existing regular file at path, for reading and
// also for writing with write. Anything else at path (a symbolic link, a
// FIFO, a folder, a device) is refused with ErrNotRegular.
func OpenRegular(path string, write bool) (*os.File, error) {
	flag := os.O_RDONLY
	if write {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		if isLinkRefusal(err) {
			return nil, &fs.PathError{Op: "open", Path: path, Err: ErrNotRegular}
		}
		return nil, err
	}
	if err := mustBeRegular(f, path, write); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ignoringEINTR calls op again while it fails with EINTR (a signal during
// a system call that may block: an open on a network filesystem, a kernel
// lock waited for).
func ignoringEINTR(op func() error) error {
	for {
		if err := op(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// isLinkRefusal reports whether err is O_NOFOLLOW's refusal of a symbolic
// link: ELOOP (Linux, macOS), EMLINK (FreeBSD).
func isLinkRefusal(err error) bool {
	return errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EMLINK)
}

// mustBeRegular refuses an open file that is not a regular file, and, when
// it is to be changed (written, touched), one with other names: a hard link
// planted at a sidecar's name must not make gpuexec change the file it
// names elsewhere. (A record has two names for an instant while it is put
// back; it is only ever changed by its holder, under the guard.)
func mustBeRegular(f *os.File, path string, change bool) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return &fs.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); change && ok && st.Nlink != 1 {
		return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: it has %d names", ErrNotRegular, st.Nlink)}
	}
	return nil
}

// CreateExcl creates the file at path, which must not exist (O_EXCL: a
// symbolic link there counts as existing and is not followed), for reading
// and writing. Its permissions are set whatever the umask (see Kind).
func CreateExcl(path string, kind Kind) (*os.File, error) {
	// Created as the umask has it (0644 under the usual 022), so that
	// readers see it at once; then given its permissions.
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		return err
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	// A new regular file, never polled: os.NewFile takes it as it is
	// (os.OpenFile would try the runtime's poller first, four fcntl calls
	// and an epoll_ctl that fails for regular files).
	f := os.NewFile(uintptr(fd), path)
	perm := sharedPerm(filepath.Dir(path))
	if kind == Locked {
		perm = 0o640
	}
	// Best effort: a filesystem that cannot hold permissions (a FAT
	// stick, some network shares) keeps what it has.
	_ = f.Chmod(perm)
	return f, nil
}

// folderPerms caches the permissions of lock folders: they are read once
// per process and folder.
var folderPerms sync.Map // folder → fs.FileMode

// sharedPerm is the mode of a file gpuexec creates in folder dir: readable
// by all, writable by the owner, and by the folder's group when the folder
// is writable by its group. In a group folder (mode 2775, group gpu) every
// member can then take the guard and clear a dead member's lock. Others
// never get write access, even where they may write the folder (a sticky
// /tmp): they can use the guard read-only (see OpenGuard), and must not be
// able to rewrite another user's record in place. In a sticky folder each
// file is its owner's alone.
func sharedPerm(dir string) fs.FileMode {
	if p, ok := folderPerms.Load(dir); ok {
		return p.(fs.FileMode)
	}
	perm := fs.FileMode(0o644)
	if fi, err := os.Stat(dir); err == nil && fi.Mode()&os.ModeSticky == 0 {
		perm |= fi.Mode().Perm() & 0o020
	}
	folderPerms.Store(dir, perm)
	return perm
}

// OpenGuard opens the guard sidecar at path, creating it if missing. It is
// opened for writing where this user may (the queue's counter lives in it)
// and for reading otherwise (a guard made by an older gpuexec, or by a
// user whose umask left it unwritable by the group): a kernel lock needs
// no more, and the queue then numbers tickets from the folder alone.
func OpenGuard(path string) (f *os.File, writable bool, err error) {
	for range 4 { // a few rounds: each loses only to another process creating or removing it
		f, err = OpenRegular(path, true)
		if err == nil {
			return f, true, nil
		}
		if errors.Is(err, fs.ErrPermission) {
			f, err = OpenRegular(path, false)
			return f, false, err
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, false, err
		}
		f, err = CreateExcl(path, Shared)
		if err == nil {
			return f, true, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, false, err
		}
		// Created by another process in between: open that one.
	}
	return nil, false, err
}

// OpenToTouch opens the regular file at path to read it and set its times
// (Touch): futimens on a file one owns needs no write access.
func OpenToTouch(path string) (*os.File, error) {
	f, err := OpenRegular(path, false)
	if err != nil {
		return nil, err
	}
	if err := mustBeRegular(f, path, true); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
