package lock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// releaseGuardWait bounds how long Release waits for the guard. Release
// must happen even if a stopped process holds the guard; without it,
// removal is still safe (rename, re-read, compare), only not serialized.
const releaseGuardWait = 5 * time.Second

// release stops the heartbeat and removes the lock file if it still holds
// this lock's pid and token; a lock that is no longer ours is left alone.
// Later calls do nothing.
func (l *heldFile) release() error {
	if !l.stopHeartbeat() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseGuardWait)
	defer cancel()
	g, gerr := takeGuard(ctx, l.o.Path)
	if gerr != nil {
		l.o.Logger.Warn("releasing GPU lock without its guard", "path", l.o.Path, "error", gerr)
	}
	// The liveness file goes first, under the guard: once the record is
	// gone, a liveness file still locked means a job still runs (see
	// sweep), and the next holder must not have to wait for it. A judge
	// without the guard that looks in between finds the record with its
	// liveness file gone and this process alive: held.
	var aside string
	var err error
	switch {
	case l.share != nil:
		_, err = l.leaveGuarded()
	case l.cover:
		_, err = l.leaveCover()
	default:
		l.live.release()
		_, aside, err = l.removeRecord()
	}
	// The guard goes before the deletion of the record set aside: the
	// next holder, woken by the removal, is waiting for it. (Held.Release
	// logged the releasing line before any of this.)
	g.release()
	if derr := deleteSetAside(aside); derr != nil {
		err = fmt.Errorf("lock: release: %w", derr)
	}
	return err
}

// stopHeartbeat marks the lock released and stops its heartbeat; false if
// it already was.
func (l *heldFile) stopHeartbeat() bool {
	if !l.released.CompareAndSwap(false, true) {
		return false
	}
	l.beatEnded()
	close(l.stop)
	<-l.done
	return true
}

// removeGuarded removes the record if it is still ours, then the liveness
// lock. Call with the guard held (or not to be had).
func (l *heldFile) removeGuarded() error {
	switch {
	case l.share != nil:
		_, err := l.leaveGuarded()
		return err
	case l.cover:
		_, err := l.leaveCover()
		return err
	}
	// The liveness lock goes after the record, on every path.
	defer l.live.release()
	_, err := l.removeRecordNow()
	return err
}

// removeRecordNow is removeRecord with the file set aside deleted at once,
// where nobody waits on this process's guard for it: a rollback, or a
// sharer's release.
func (l *heldFile) removeRecordNow() (bool, error) {
	removed, aside, err := l.removeRecord()
	if err != nil {
		return false, err
	}
	return removed, deleteSetAside(aside)
}

// removeRecord sets the record aside if it is still ours (read and judged
// first, then setAside, which re-reads it), reporting whether it did and
// the file set aside, which the caller deletes ("" when none). A record
// that is not ours is never touched, not even renamed for a moment. Call
// with the guard held (or not to be had), then release the liveness lock.
func (l *heldFile) removeRecord() (removed bool, aside string, err error) {
	st, err := l.readOurs()
	if errors.Is(err, errNotOurs) {
		l.o.Logger.Warn("GPU lock was no longer ours at release; left it alone", "path", l.o.Path, "reason", err)
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("lock: release: %w", err)
	}
	if aside, err = setAside(l.o.Path, st); err != nil {
		return false, "", fmt.Errorf("lock: release: %w", err)
	}
	return aside != "", aside, nil
}
