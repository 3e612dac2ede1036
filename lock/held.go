package lock

import (
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuexec/gpuexec/internal/lost"
	"github.com/gpuexec/gpuexec/internal/proc"
)

// Held is a held lock, or the devices one job holds (an ordinary lock on
// each). It stays held, and is never judged stale, until Release returns or
// Lost is closed, however long that takes; a Held dropped without Release
// stays held until this process exits (and, through LiveFiles, until the
// processes that inherited them exit). Its methods are safe for concurrent
// use.
type Held struct {
	o       Options
	devices []string // the names held, nil for one lock
	locks   []*heldFile
	lost    *lost.Signal
	// queueExit is what Acquire's wait left behind (a ticket, a
	// watch), let go of beside the job's start (see leaveQueueLater);
	// nil when it left nothing.
	queueExit *queueExit
	// cover is, for a device set, its part of the lock at Options.Path
	// while it holds devices beside it (see cover.go); nil otherwise.
	cover *heldFile
	// group is the job's process group as NoteChild or RecordChild
	// was told of it.
	groupMu sync.Mutex
	group   jobGroup
	// releasing is set by the first Release.
	releasing atomic.Bool
}

// heldTaken, when set, is told of each Held as it is taken. This package's
// tests set it to report a Held that becomes unreachable without Release
// (see dropped_test.go); nil otherwise, it costs a Held nothing.
var heldTaken func(*Held)

// Path is the lock file's absolute path (with devices, the queue's).
func (h *Held) Path() string { return h.o.Path }

// Devices are the names of the devices held, in Options.Devices' order;
// nil for a lock without devices.
func (h *Held) Devices() []string { return append([]string(nil), h.devices...) }

// Info is the record written into the lock file (with devices, the first
// device's: every record has the same pid, owner and slug, and a token of
// its own).
func (h *Held) Info() Info { return h.locks[0].record() }

// Tokens are the records' tokens, one per lock held (in Devices' order).
func (h *Held) Tokens() []string {
	out := make([]string, len(h.locks))
	for i, l := range h.locks {
		out[i] = l.record().Token
	}
	return out
}

// LiveFiles are the open liveness files whose kernel locks mark this holder
// alive: one per lock held, and for a sharer its sidecar too. Pass them to the processes that do the guarded
// work (exec.Cmd.ExtraFiles on Unix) and the locks stay alive, even if this
// process is killed, for as long as any of them runs. Do not close them.
func (h *Held) LiveFiles() []*os.File {
	var out []*os.File
	for _, l := range h.locks {
		out = append(out, l.live.f)
		if l.share != nil {
			out = append(out, l.share.f)
		}
	}
	if h.cover != nil {
		out = append(out, h.cover.live.f)
	}
	return out
}

// NoteUse records, for a sharer (Options.ShareMiB), the video memory its job
// was last measured using, and whether that is over its budget by more
// than the caller allows, in its sidecar, where status shows it. It does
// nothing for a holder that is not a sharer.
func (h *Held) NoteUse(usedMiB int64, over bool) error {
	var errs []error
	for _, l := range h.locks {
		if l.share != nil {
			errs = append(errs, l.noteShare(func(s *Sharer) { s.UsedMiB, s.Over = usedMiB, over }))
		}
	}
	return errors.Join(errs...)
}

// Lost is closed when a lock held was found to be no longer ours (removed,
// or replaced by another holder's); someone else may hold it from then on,
// and the caller should stop using what it guards.
func (h *Held) Lost() <-chan struct{} { return h.lost.Lost() }

// LostReason says why Lost was closed; nil while it is not.
func (h *Held) LostReason() error { return h.lost.Reason() }

// NoteChild notes the process group of the job run under the lock (pgid,
// the job's first process's pid) where it keeps the lock held, so that the
// lock stays held while that group runs even if this process is killed and
// the job's processes closed the files they inherited (see LiveFiles). A
// group that later carries the same number is never taken for the job's.
// It is cheap (no wait for other processes, no new file): call it the
// moment the job starts. RecordChild puts the group into the records
// themselves, where status shows it.
func (h *Held) NoteChild(pgid int) error {
	g := h.jobGroup(pgid)
	var errs []error
	for _, l := range h.locks {
		if l.share != nil {
			errs = append(errs, l.noteSharer(g))
		} else {
			errs = append(errs, l.live.note(g))
		}
	}
	return errors.Join(errs...)
}

// LeaveQueue gives up, in the background, the place in the queue that
// Acquire waited in. Acquire keeps that place past its return, where it
// holds nobody up (what it waited for is held), because giving it up is
// work that wakes other waiters: call LeaveQueue once the work done under
// the lock has started, so that the two do not compete. Without it the
// place goes shortly after Acquire returned; Release gives it up at the
// latest. It does nothing for a Held without such a place (TryAcquire's,
// an Acquire that did not wait), nor the second time.
func (h *Held) LeaveQueue() {
	if h.queueExit != nil {
		h.queueExit.start()
	}
}

// RecordChild writes the process group of the job run under the lock into
// each record (childPgid, childStart), so that the lock stays alive while
// that group runs even if this process is killed. It also counts as a
// heartbeat.
func (h *Held) RecordChild(pgid int) error {
	g := h.jobGroup(pgid)
	var errs []error
	for _, l := range h.locks {
		errs = append(errs, l.recordChild(g))
	}
	if h.cover != nil {
		errs = append(errs, h.cover.recordChild(g))
	}
	return errors.Join(errs...)
}

// jobGroup is the job's group pgid with its leader's start time, read once
// per group.
func (h *Held) jobGroup(pgid int) jobGroup {
	h.groupMu.Lock()
	defer h.groupMu.Unlock()
	if h.group.id != pgid {
		h.group = jobGroup{id: pgid}
		h.group.since, _ = proc.Start(pgid)
	}
	return h.group
}

// logAcquired logs the acquired line: the lock, how long it was waited
// for, and the devices taken.
func (h *Held) logAcquired(waited time.Duration) {
	h.o.Logger.Info("acquired GPU lock", append(h.logFields(), "waited", fmtAge(waited))...)
}

// logFields name the lock held in its acquired and releasing lines: its
// path, and the devices taken.
func (h *Held) logFields() []any {
	f := []any{"path", h.o.Path}
	if h.devices != nil {
		f = append(f, "devices", strings.Join(h.devices, ","))
	}
	return f
}

// Release stops the heartbeat and removes each lock file that still holds
// this holder's pid and token; a lock that is no longer ours is left alone.
// It is safe to call more than once; later calls do nothing.
//
// The first call logs "releasing GPU lock" before it gives anything up, so
// that in a log several holders share, a holder's releasing line comes
// before the acquired line of the one it hands the lock to. A release
// that then fails says so in its error; a lock found to be no longer ours
// is logged as such.
func (h *Held) Release() error {
	if h.releasing.CompareAndSwap(false, true) {
		h.o.Logger.Info("releasing GPU lock", h.logFields()...)
	}
	var errs []error
	for _, l := range h.locks {
		errs = append(errs, l.release())
	}
	if h.cover != nil {
		// After the devices: the cover goes only once none beside it
		// is held.
		errs = append(errs, h.cover.release())
	}
	if h.queueExit != nil {
		h.queueExit.start()
		<-h.queueExit.left
	}
	return errors.Join(errs...)
}

// leaveQueueLater lets go of what waiting for h left behind, the queue
// ticket tk and the watch wk, beside the job's start rather than before
// it: a ticket's removal and close are changes in the folder that wake the
// waiter behind, and closing an inotify instance waits for the kernel (an
// SRCU grace period; see docs/performance.md). They are let go on a
// goroutine of their own once the job has started (LeaveQueue), at
// Release, or leaveQueueAfter after the lock was had, whichever comes
// first; Release waits for them. Until then the ticket stays in the queue,
// ahead of every other, which changes nothing for the waiters behind: the
// one lock it waited for is held (a device set's or a sharer's ticket goes
// at once: see attempt).
func (h *Held) leaveQueueLater(tk *ticket, wk *waker) {
	if tk == nil && wk == nil {
		return
	}
	q := &queueExit{left: make(chan struct{}), leave: func() {
		tk.drop()
		wk.close()
	}}
	h.queueExit = q
	// Not stopped when something else comes first: start runs once.
	time.AfterFunc(leaveQueueAfter, q.start)
}

// leaveQueueAfter bounds how long an Acquire's ticket and watch outlive it
// when nothing (LeaveQueue) says that the job has started: a caller that
// guards work of its own keeps no ticket in the queue for longer. (A
// variable for the tests.)
var leaveQueueAfter = 50 * time.Millisecond

// queueExit is the leaving of the queue that leaveQueueLater put off.
type queueExit struct {
	once  sync.Once
	leave func()        // drops the ticket and closes the watch
	left  chan struct{} // closed once leave has returned
}

// start runs leave on a goroutine of its own, the first time only.
func (q *queueExit) start() {
	q.once.Do(func() {
		go func() {
			defer close(q.left)
			q.leave()
		}()
	})
}
