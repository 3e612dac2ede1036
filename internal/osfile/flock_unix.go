//go:build unix

package osfile

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// TryLock takes an exclusive flock on f without blocking; ok=false when
// another open file description holds it. The kernel drops it when the
// process dies.
func TryLock(f *os.File) (ok bool, err error) {
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// Unlock drops the flock taken by TryLock.
func Unlock(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_UN)
}

// TryLockShared takes a shared flock on f without blocking; ok=false when
// another open file description holds it exclusively. Probes use it so that
// several can look at once without mistaking each other for the holder.
func TryLockShared(f *os.File) (ok bool, err error) {
	err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// WaitLock takes an exclusive flock on f, waiting in the kernel, which
// hands the lock to a waiter the moment its holder lets go: no polling, no
// sleeping past the release. If ctx ends first it reports gaveUp, and f is
// no longer the caller's: it is closed once the wait ends (the lock, if it
// came, dropped first).
func WaitLock(ctx context.Context, f *os.File) (ok, gaveUp bool, err error) {
	done := make(chan error, 1)
	go func() {
		done <- ignoringEINTR(func() error { return unix.Flock(int(f.Fd()), unix.LOCK_EX) })
	}()
	select {
	case err := <-done:
		return err == nil, false, err
	case <-ctx.Done():
		go func() {
			if err := <-done; err == nil {
				Unlock(f)
			}
			f.Close()
		}()
		return false, true, ctx.Err()
	}
}
