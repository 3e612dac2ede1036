// Package osfile holds the operating-system primitives of the lock-file
// protocol and of the --log file, each with the same contract on every OS:
//
//   - opens that never follow a link at the path, never block (a FIFO, a
//     device) and refuse anything but a regular file (OpenFile, and for
//     the lock's files OpenRegular, CreateExcl, OpenGuard, OpenToTouch;
//     open_unix.go, open_windows.go); on Windows they share read, write
//     and delete access, as Node does;
//   - kernel locks on an open file: exclusive and shared tries, a wait in
//     the kernel, unlock (flock_unix.go: flock; lockfile_windows.go:
//     LockFileEx on one byte);
//   - a rename that never replaces (rename_unix.go: link then unlink;
//     rename_windows.go: MoveFileEx);
//   - setting an open file's mtime through its handle (touch_*.go);
//   - Windows' transient sharing violations retried for a bounded time
//     (sharing_windows.go; RetrySharing runs once elsewhere).
//
// Every file in a lock's folder may have been put there by another local
// user: nothing here reads a path out of a file, and nothing follows one.
// The system calls that a signal may interrupt (EINTR) are retried here,
// once for all callers.
package osfile

import (
	"errors"
	"fmt"
	"io/fs"
)

// ErrNotRegular is returned (wrapped in a *fs.PathError) when a path is
// something other than a regular file: a folder, a symbolic link, a FIFO, a
// device.
var ErrNotRegular = errors.New("not a regular file")

// ErrNotSetgid is returned (wrapped in a *fs.PathError naming the folder)
// for a lock folder that its group may write but that is not setgid: each
// file made in it would belong to its creator's primary group, which other
// members may not be in, and users outside the folder's group may (Unix).
var ErrNotSetgid = errors.New("its group may write it, but it is not setgid")

// ErrOpenToAll is returned (wrapped in a *fs.PathError naming the folder)
// for a lock folder that every user may write but that is not sticky:
// anyone could remove or replace the lock's files (Unix).
var ErrOpenToAll = errors.New("every user may write it, and it is not sticky")

// LooseError is a guard that users outside its folder's group may open
// (made by an older gpuexec), which this user may not tighten: only its
// owner or root may change its mode and group.
type LooseError struct {
	Path    string
	Perm    fs.FileMode // its permission bits
	UID     int         // its owner
	GID     int         // its group
	WantGID int         // the folder's group
}

func (e *LooseError) Error() string {
	return fmt.Sprintf("%s may be opened by users outside the folder's group (%v, uid %d, group %d; made by an older gpuexec?), "+
		"who could hold it and stop every job: its owner or root must run gpuexec once, or: chmod o-rwx %s && chgrp %d %s",
		e.Path, e.Perm, e.UID, e.GID, e.Path, e.WantGID, e.Path)
}

// Kind says what a file CreateExcl creates is for, and so who gets which
// access to it (Unix: see FolderRule; on Windows the folder's inherited
// ACL decides).
type Kind int

const (
	// Shared: the guard and the record.
	Shared Kind = iota
	// Locked: a holder's liveness file or a ticket, whose kernel lock
	// says its holder lives. Nobody outside the folder's group may open
	// it, so that nobody can take that lock and make a dead holder or
	// waiter look alive (see FolderRule); only its owner may write it
	// (a ticket's record, a liveness file's noted job group).
	Locked
	// Sidecar: a sharer's sidecar, a Locked file that only its owner
	// may write: what it says of its sharer (budget, job's group) is
	// believed only as its owner's word (lock's vouch), so no member
	// may rewrite another's.
	Sidecar
	// Joined: the liveness file of a shared record, which the record's
	// sharers, of any member, join for writing: its last writable close
	// is what wakes a waiter (see lock's joinLive). What is written in it
	// is never read.
	Joined
)

// kinds is the number of Kinds.
const kinds = 4
