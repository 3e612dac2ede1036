//go:build windows

package osfile

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockByte is the offset of the byte that TryLock and TryLockShared
// lock. Windows byte-range locks are mandatory: a locked range cannot be
// read through another handle. Locking a byte far past any content (as
// SQLite does with its lock bytes at 1 GiB) keeps the files that are
// locked while they hold a record (queue tickets) readable by status.
const lockByte = 0x40000000

// lockRange is the Overlapped that names lockByte.
func lockRange() *windows.Overlapped { return &windows.Overlapped{Offset: lockByte} }

// TryLock takes an exclusive LockFileEx lock on f's lock byte without
// blocking; ok=false when another handle holds it. Windows drops it when
// the process dies.
func TryLock(f *os.File) (ok bool, err error) {
	err = windows.LockFileEx(windows.Handle(f.Fd()),
		windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, lockRange())
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) || errors.Is(err, windows.ERROR_IO_PENDING) {
		return false, nil
	}
	return err == nil, err
}

// Unlock drops the lock taken by TryLock or TryLockShared.
func Unlock(f *os.File) error {
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, lockRange())
}

// TryLockShared takes a shared LockFileEx lock on f's lock byte without
// blocking; ok=false when another handle holds it exclusively.
func TryLockShared(f *os.File) (ok bool, err error) {
	err = windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, lockRange())
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) || errors.Is(err, windows.ERROR_IO_PENDING) {
		return false, nil
	}
	return err == nil, err
}

// WaitLock reports ok=false at once: the caller polls with TryLock.
// A blocking LockFileEx would need a handle opened for synchronous I/O and
// cannot be abandoned when ctx ends.
func WaitLock(ctx context.Context, f *os.File) (ok, gaveUp bool, err error) {
	return false, false, nil
}
