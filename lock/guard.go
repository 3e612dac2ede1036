package lock

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
)

// errGuardStuck says the guard has been held for longer than any step
// under it takes.
func errGuardStuck(path string) error {
	return fmt.Errorf("lock: another process has held %s for over %s; is a gpuexec stopped (SIGSTOP) mid-step?", path+guardSuffix, clearGuardWait)
}

func releaseGuards(guards []*guard) {
	for _, g := range guards {
		g.release()
	}
}

// clearGuardWait bounds how long Clear, a heartbeat and RecordChild wait
// for the guard, which is normally held for a few system calls at a time: a
// process stopped (SIGSTOP) while holding it must not hang them.
const clearGuardWait = 10 * time.Second

// guardSuffix names the sidecar file, beside the lock file, on which gpuexec
// processes take a kernel lock (flock / LockFileEx) while they judge, clear,
// create, touch or remove the lock file. It serializes those steps among
// gpuexec processes, closing the seed's window in which a lock set aside as
// stale is put back over a lock created meanwhile; the kernel drops it when
// its holder dies. The sidecar is permanent and holds nothing: deleting it
// while no gpuexec runs is harmless. The lock file itself stays the seed's,
// so processes that know nothing of the sidecar still exclude gpuexec.
const guardSuffix = ".guard"

// Where the guard cannot be waited for in the kernel (Windows; see
// osfile.WaitLock), the pause between tries starts at guardFirstRetry and
// doubles up to guardRetry. The guard is held for a few system calls at a
// time (tens of microseconds), so the first tries come quickly: a waiter
// woken by a release meets the releaser still holding it. On Unix a try
// comes again only if the sidecar was replaced while it was waited for.
const (
	guardFirstRetry = 50 * time.Microsecond
	guardRetry      = 2 * time.Millisecond
)

// guard is a held kernel lock on the sidecar file. writable says whether
// this process could open it for writing (see osfile.OpenGuard).
type guard struct {
	f        *os.File
	writable bool
}

// guards counts the guards this process holds, so that Suspend can stop
// it at a moment when it holds none.
var guards struct {
	mu        sync.Mutex
	cond      *sync.Cond
	held      int
	suspended bool
}

func init() { guards.cond = sync.NewCond(&guards.mu) }

// suspend runs stop — which stops this process, as a SIGSTOP to itself
// does — at a moment when the process holds no guard, and lets it take
// none until stop returns (the process was continued). A process stopped
// while it holds a guard (a few system calls at a time) would make every
// other process of the lock wait for it.
func suspend(stop func()) {
	guards.mu.Lock()
	guards.suspended = true
	for guards.held > 0 {
		guards.cond.Wait()
	}
	guards.mu.Unlock()
	stop()
	guards.mu.Lock()
	guards.suspended = false
	guards.cond.Broadcast()
	guards.mu.Unlock()
}

// countGuard counts a guard just taken, reporting false (the caller lets
// go of it and waits) while the process is being suspended, but for an
// inner guard (see takeInnerGuard).
func countGuard(inner bool) bool {
	guards.mu.Lock()
	defer guards.mu.Unlock()
	if guards.suspended && !inner {
		return false
	}
	guards.held++
	return true
}

// awaitResume blocks while the process is being suspended.
func awaitResume() {
	guards.mu.Lock()
	for guards.suspended {
		guards.cond.Wait()
	}
	guards.mu.Unlock()
}

// takeGuard blocks until it holds the sidecar lock of the lock at path, or
// ctx ends.
func takeGuard(ctx context.Context, path string) (*guard, error) { return lockGuard(ctx, path, false) }

// takeInnerGuard is takeGuard for a guard taken while this process holds
// another (a device's, under the queue's): it does not wait for a suspend,
// which itself waits for the outer guard to go, so that the two never wait
// for each other.
func takeInnerGuard(ctx context.Context, path string) (*guard, error) {
	return lockGuard(ctx, path, true)
}

func lockGuard(ctx context.Context, path string, inner bool) (*guard, error) {
	gpath := path + guardSuffix
	var wait *time.Timer
	delay := guardFirstRetry
	for {
		f, writable, err := osfile.OpenGuard(gpath)
		if err != nil {
			return nil, err
		}
		ok, err := osfile.TryLock(f)
		if err == nil && !ok {
			// Held: wait for it in the kernel where that is possible.
			var gaveUp bool
			if ok, gaveUp, err = osfile.WaitLock(ctx, f); gaveUp {
				return nil, err // f is osfile.WaitLock's now
			}
		}
		if err != nil {
			f.Close()
			return nil, &fs.PathError{Op: "lock", Path: gpath, Err: err}
		}
		if ok {
			// The sidecar may have been deleted and re-created while we
			// opened it: only a lock on the file now at the path counts.
			held, herr := f.Stat()
			now, nerr := os.Stat(gpath)
			if herr == nil && nerr == nil && os.SameFile(held, now) {
				if countGuard(inner) {
					return &guard{f: f, writable: writable}, nil
				}
				// Being suspended: let go, and try again after.
				osfile.Unlock(f)
				f.Close()
				awaitResume()
				continue
			}
			osfile.Unlock(f)
		}
		f.Close()
		if wait == nil {
			wait = time.NewTimer(delay)
			defer wait.Stop()
		} else {
			wait.Reset(delay)
		}
		delay = min(2*delay, guardRetry)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait.C:
		}
	}
}

// release drops the guard. Closing the file drops the kernel lock too; the
// explicit unlock only makes it prompt.
func (g *guard) release() {
	if g == nil {
		return
	}
	osfile.Unlock(g.f)
	g.f.Close()
	guards.mu.Lock()
	guards.held--
	guards.cond.Broadcast()
	guards.mu.Unlock()
}
