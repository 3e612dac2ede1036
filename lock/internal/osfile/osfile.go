// Package osfile holds the operating-system primitives of the lock-file
// protocol, each with the same contract on every OS:
//
//   - opens that never follow a link at the path, never block (a FIFO, a
//     device) and refuse anything but a regular file (OpenRegular,
//     CreateExcl, OpenGuard, OpenToTouch; open_unix.go, open_windows.go);
//     on Windows they share read, write and delete access, as Node does;
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
package osfile

import "errors"

// ErrNotRegular is returned (wrapped in a *fs.PathError) when a path is
// something other than a regular file: a folder, a symbolic link, a FIFO, a
// device.
var ErrNotRegular = errors.New("not a regular file")

// Kind says who gets which access to a file CreateExcl creates (Unix; on
// Windows the folder's inherited ACL decides).
type Kind int

const (
	// Shared: the guard and the record. Readable by all; writable by the
	// owner and, where the folder's group may write the folder, by the
	// group (see sharedPerm).
	Shared Kind = iota
	// Locked: a liveness file or a ticket, whose kernel lock says its
	// holder lives. 0640: the folder's group may probe the lock (a shared
	// lock needs only reading), others may not open it at all, so that
	// nobody outside the group can take that lock and make a dead holder
	// or waiter look alive.
	Locked
)
