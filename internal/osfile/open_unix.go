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
	"time"

	"golang.org/x/sys/unix"
)

// Every file in the lock's folder may have been put there by another local
// user: the opens here never follow a symbolic link at the path
// (O_NOFOLLOW), never block on a FIFO or a device (O_NONBLOCK), and refuse
// anything but a regular file before a byte is read from it or written to
// it. For a regular file O_NONBLOCK changes nothing.

// OpenFile opens the file at path with flag (as os.OpenFile takes it),
// creating it with perm (less the umask) where flag says so, and returns it
// with its state. Anything at path but a regular file (a symbolic link, a
// FIFO, a folder, a device, a socket) is refused with ErrNotRegular; a link
// is never followed, nor a FIFO or a device waited on.
func OpenFile(path string, flag int, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, perm)
	if err != nil {
		if isNotRegularRefusal(err) {
			return nil, nil, &fs.PathError{Op: "open", Path: path, Err: ErrNotRegular}
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
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	return f, fi, nil
}

// OpenRegular opens the existing regular file at path, for reading and
// also for writing with write. Anything else at path (a symbolic link, a
// FIFO, a folder, a device) is refused with ErrNotRegular, and so, when it
// is to be written, is a file with other names.
func OpenRegular(path string, write bool) (*os.File, error) {
	if write {
		return openToChange(path, os.O_RDWR)
	}
	f, _, err := OpenFile(path, os.O_RDONLY, 0)
	return f, err
}

// openToChange opens the existing regular file at path with flag, to
// change it (write it, touch it): a file with other names is refused too.
func openToChange(path string, flag int) (*os.File, error) {
	f, fi, err := OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	if err := singleName(fi, path); err != nil {
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

// isNotRegularRefusal reports whether err is an open's refusal of
// something that is not a regular file: O_NOFOLLOW's of a symbolic link
// (ELOOP on Linux and macOS, EMLINK on FreeBSD), O_NONBLOCK's of a FIFO
// with no reader to write to, or of a socket (ENXIO), a folder's for
// writing (EISDIR).
func isNotRegularRefusal(err error) bool {
	return errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EMLINK) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.EISDIR)
}

// singleName refuses a file to be changed (written, touched), in state fi
// at path, that has other names: a hard link planted at a sidecar's name
// must not make gpuexec change the file it names elsewhere. (A record has
// two names for an instant while it is put back; it is only ever changed
// by its holder, under the guard.)
func singleName(fi fs.FileInfo, path string) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink != 1 {
		return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: it has %d names", ErrNotRegular, st.Nlink)}
	}
	return nil
}

// CreateExcl creates the file at path, which must not exist (O_EXCL: a
// symbolic link there counts as existing and is not followed), for reading
// and writing. It is given the folder's group and the mode of its Kind
// there (see FolderRule), whatever the umask; a folder that FolderRule
// refuses gets no file.
func CreateExcl(path string, kind Kind) (*os.File, error) {
	rule, err := FolderRule(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	// Created with no more than its final mode (the umask may take group
	// bits away until the fchmod below: a member who opens it in that
	// instant is refused, never an outsider let in), and with none for
	// the group where it starts in another group than the folder's,
	// then given it.
	perm := rule.Perm[kind]
	if rule.GID >= 0 && !rule.setgid && os.Getegid() != rule.GID {
		perm &^= 0o070
	}
	var fd int
	err = ignoringEINTR(func() (err error) {
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm))
		return err
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	// A new regular file, never polled: os.NewFile takes it as it is
	// (os.OpenFile would try the runtime's poller first, four fcntl calls
	// and an epoll_ctl that fails for regular files).
	f := os.NewFile(uintptr(fd), path)
	// Best effort: a filesystem that cannot hold owners and permissions
	// (a FAT stick, some network shares) keeps what it has.
	_ = conform(f, rule, kind)
	return f, nil
}

// conform gives the open file f the group and mode that rule has for kind:
// the folder's group where it needs one, and where f is in another group
// that this user cannot change (not a member of the folder's group), no
// group bits at all.
func conform(f *os.File, rule Rule, kind Kind) error {
	perm := rule.Perm[kind]
	if rule.GID >= 0 {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return err
		}
		if int(st.Gid) != rule.GID {
			if err := f.Chown(-1, rule.GID); err != nil {
				perm &^= 0o070
			}
		}
	}
	return f.Chmod(perm)
}

// Rule is how gpuexec makes files in one lock folder, from the folder's
// own owner, group and mode: nobody outside the folder's group may open
// them (an open file is all it takes to hold a kernel lock on it, and so
// to stop every job, or to keep a dead holder looking alive).
type Rule struct {
	// Perm is the mode of each Kind of file.
	Perm [kinds]fs.FileMode
	// GID is the group the files must be in; -1 where any will do (a
	// folder every user may write: see FolderRule).
	GID int
	// setgid: the folder gives each new file its group.
	setgid bool
}

// FolderRule returns the Rule of the lock folder dir (read once per
// process and folder):
//
//   - a folder every user may write, sticky (/tmp itself): nobody is
//     outside it (anyone may create the lock there), and every file is
//     0644, in its creator's group: any user may probe any file's kernel
//     lock, so a dead waiter's or holder's file is told from a live one's
//     whoever made it; a shared record's liveness file (Joined) 0666, so
//     that sharers of every user join it for writing (its last close is
//     then one a waiter's watch reports); what it holds is never read;
//   - a folder every user may write, not sticky (0777, 2777): refused
//     (ErrOpenToAll), anyone could remove or replace the lock's files;
//   - a folder its group may write (a group folder, 2775): the guard, the
//     record and a shared record's liveness file (Joined) 0660 in the
//     folder's group, tickets, holders' liveness files and sidecars 0640
//     (only their owner may write what they say). Only with setgid, which
//     gives each new file the folder's group: without it a file would be
//     in its creator's primary group, which other members may not be in
//     and outsiders may, and the folder is refused (ErrNotSetgid);
//   - any other folder (only its owner may write it: the default
//     <tmp>/gpuexec, made 0700): 0600, whatever the folder lets its group
//     do: its group may be everybody's (a folder an older gpuexec made
//     0755 in its creator's primary group, "users"), and a file its
//     members could open they could lock.
func FolderRule(dir string) (Rule, error) {
	if r, ok := folderRules.Load(dir); ok {
		return r.(Rule), nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return Rule{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Rule{}, &fs.PathError{Op: "stat", Path: dir, Err: errors.New("cannot tell its group")}
	}
	m := fi.Mode()
	var r Rule
	switch {
	case m&0o002 != 0 && m&os.ModeSticky != 0:
		r = Rule{Perm: [kinds]fs.FileMode{Shared: 0o644, Locked: 0o644, Sidecar: 0o644, Joined: 0o666}, GID: -1}
	case m&0o002 != 0:
		return Rule{}, &fs.PathError{Op: "use", Path: dir, Err: ErrOpenToAll}
	case m&0o020 != 0 && m&os.ModeSetgid == 0:
		return Rule{}, &fs.PathError{Op: "use", Path: dir, Err: ErrNotSetgid}
	case m&0o020 != 0:
		r = Rule{Perm: [kinds]fs.FileMode{Shared: 0o660, Locked: 0o640, Sidecar: 0o640, Joined: 0o660}, GID: int(st.Gid), setgid: true}
	default:
		r = Rule{Perm: [kinds]fs.FileMode{Shared: 0o600, Locked: 0o600, Sidecar: 0o600, Joined: 0o600}, GID: int(st.Gid)}
	}
	r.setgid = r.setgid || m&os.ModeSetgid != 0
	folderRules.Store(dir, r)
	return r, nil
}

// folderRules caches FolderRule: folder → Rule.
var folderRules sync.Map

// guardOpenTries bounds the opens of a guard that this user may not open:
// its creator gives it its mode a moment after it creates it (see
// CreateExcl), with a umask that may have left the group out until then.
const (
	guardOpenTries = 4
	guardOpenPause = time.Millisecond
)

// OpenGuard opens the guard sidecar at path, creating it if missing. It is
// opened for writing where this user may (the queue's counter lives in it)
// and for reading otherwise (a guard made by an older gpuexec, or by a
// user whose umask left it unwritable by the group): a kernel lock needs
// no more, and the queue then numbers tickets from the folder alone.
//
// The guard is permanent, so one made by an older gpuexec, open to users
// outside the folder's group, stays: its owner or root gives it the
// folder's group and mode (see FolderRule) here; anyone else gets a
// *LooseError and no guard. A guard that cannot be opened at all is an
// error (fs.ErrPermission), never a guard that is held.
func OpenGuard(path string) (f *os.File, writable bool, err error) {
	rule, err := FolderRule(filepath.Dir(path))
	if err != nil {
		return nil, false, err
	}
	denied := 0
	for range 4 + guardOpenTries { // each round loses only to another process creating or removing it, or giving it its mode
		f, err = OpenRegular(path, true)
		writable = err == nil
		if errors.Is(err, fs.ErrPermission) {
			f, err = OpenRegular(path, false)
		}
		if err == nil {
			if err := tighten(f, path, rule); err != nil {
				f.Close()
				return nil, false, err
			}
			return f, writable, nil
		}
		if errors.Is(err, fs.ErrPermission) {
			if denied++; denied == guardOpenTries {
				return nil, false, err
			}
			time.Sleep(guardOpenPause)
			continue
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

// tighten gives the guard open as f (at path) the group and mode that rule
// has for it, where this user is its owner or root (an older gpuexec's
// guard, open to others; or one whose mode keeps members out). Where this
// user may not, a guard open to users outside the folder's group is a
// *LooseError; a stricter one is left as it is (those it keeps out are
// told they cannot open it).
func tighten(f *os.File, path string, rule Rule) error {
	if rule.GID < 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	perm := fs.FileMode(st.Mode) & fs.ModePerm
	if perm == rule.Perm[Shared] && int(st.Gid) == rule.GID {
		return nil
	}
	if st.Nlink != 1 {
		// Never a mode changed through a name planted beside the lock
		// for a file elsewhere (opened read-only, unchecked so far).
		return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: it has %d names", ErrNotRegular, st.Nlink)}
	}
	loose := perm&0o007 != 0 || perm&0o070 != 0 && int(st.Gid) != rule.GID
	if uid := os.Geteuid(); uid == 0 || uint32(uid) == st.Uid {
		// Best effort where the file stays closed to others (a
		// filesystem that cannot hold owners and permissions).
		if err := conform(f, rule, Shared); err == nil || !loose {
			return nil
		}
	}
	if !loose {
		return nil
	}
	return &LooseError{Path: path, Perm: perm, UID: int(st.Uid), GID: int(st.Gid), WantGID: rule.GID}
}

// OpenToTouch opens the regular file at path to read it and set its times
// (Touch): futimens on a file one owns needs no write access.
func OpenToTouch(path string) (*os.File, error) {
	return openToChange(path, os.O_RDONLY)
}
