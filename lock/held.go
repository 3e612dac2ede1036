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
// each). Its heartbeat keeps each lock file's mtime fresh until Release. Its
// methods are safe for concurrent use.
type Held struct {
	o       Options
	devices []string // the names held, nil for one lock
	locks   []*heldFile
	lost    *lost.Signal
	// What waiting left behind (a ticket, a watch), let go of beside the
	// job's start: see retire.
	retiring   func()
	retired    chan struct{} // closed once let go of; nil when nothing was left
	retireOnce sync.Once
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
// the job's first process's pid), in each liveness file and, for a sharer,
// in its sidecar, so that the lock stays alive while that group runs even
// if this process is killed and the job's processes closed the files they
// inherited. The group's leader's start time goes with it, so that a group
// that later carries the same number is never taken for the job's. It is
// one write per lock, with no guard and no new file: call it the moment
// the job starts. It also lets go, in the background, of the queue ticket
// and the watch that Acquire waited with, which were kept until then so
// that the job's start did not wait for their removal. RecordChild puts the
// group into the records themselves, where status shows it.
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
	h.letGo()
	return errors.Join(errs...)
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
	if h.retired != nil {
		h.letGo()
		<-h.retired
	}
	return errors.Join(errs...)
}

// retire lets go of what waiting for h left behind, the queue ticket tk
// and the watch wk, beside the job's start rather than before it: a
// ticket's removal and close are changes in the folder that wake the
// waiter behind, and an inotify instance's close waits for the kernel (an
// SRCU grace period, 10-20 ms). They are let go on a goroutine of their
// own once the job has started (NoteChild), at Release, or retireAfter
// after the lock was had, whichever comes first; Release waits for them.
// Until then the ticket stays in the queue, ahead of every other, which
// changes nothing for the waiters behind: the one lock it waited for is
// held (a device set's or a sharer's ticket goes at once: see attempt).
func (h *Held) retire(tk *ticket, wk *waker) {
	if tk == nil && wk == nil {
		return
	}
	h.retiring = func() {
		tk.drop()
		wk.close()
	}
	h.retired = make(chan struct{})
	// Not stopped when something else comes first: letGo runs once.
	time.AfterFunc(retireAfter, h.letGo)
}

// retireAfter bounds how long an Acquire's ticket and watch outlive it when
// nothing (NoteChild) says that the job has started: a caller that guards
// work of its own keeps no ticket in the queue for longer. (A variable for
// the tests.)
var retireAfter = 50 * time.Millisecond

// letGo starts what retire put off, once; it does nothing for a Held that
// has nothing to let go of.
func (h *Held) letGo() {
	if h.retired == nil {
		return
	}
	h.retireOnce.Do(func() {
		go func() {
			defer close(h.retired)
			h.retiring()
		}()
	})
}
