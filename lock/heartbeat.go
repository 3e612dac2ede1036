package lock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuexec/gpuexec/internal/lost"
	"github.com/gpuexec/gpuexec/lock/internal/osfile"
)

// heldFile is one lock file held: a Held's lock, or one of its devices'.
// Its heartbeat keeps the file's mtime fresh until release. Its methods are
// safe for concurrent use.
type heldFile struct {
	o    Options // o.Path is this lock file
	info *Info
	live *liveLock
	// share is a sharer's sidecar (Options.ShareMiB); nil for a holder
	// that has the lock alone. info is then the shared record as joined.
	share *shareHold
	// cover says this is a device set's part of the lock at the path its
	// devices are beside (see cover.go): info is the cover as joined,
	// live its shared liveness lock; group is the job's, once told.
	cover bool
	group jobGroup

	mu       sync.Mutex
	released atomic.Bool

	// lost is the Held's: marked when this lock was found to be no
	// longer ours (removed, or replaced by another holder's).
	lost *lost.Signal
	stop chan struct{}
	done chan struct{}
	// beat ends with the heartbeat (stopHeartbeat): a heartbeat waiting
	// for the guard gives up at once, even where the one stopping it
	// holds that guard (a device set rolled back under its guards).
	beat      context.Context
	beatEnded context.CancelFunc
}

func newHeldFile(o Options, info *Info, live *liveLock, share *shareHold, ls *lost.Signal, cover bool) *heldFile {
	h := &heldFile{
		o:     o,
		info:  info,
		live:  live,
		share: share,
		cover: cover,

		lost: ls,
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	h.beat, h.beatEnded = context.WithCancel(context.Background())
	go h.heartbeat()
	return h
}

// selfCheck is how often a holder reads its lock file to see that it still
// holds its record (one small read, without the guard): a forced clear, or
// the seed's tool clearing it by its mtime and taking it, is noticed within
// a second, not a heartbeat later. (The file's identity would not do: a
// file created just after one is removed may get the same inode number.)
// (Watching the folder would notice at once, but closing an inotify
// instance waits for the kernel, which every release would then wait for:
// see docs/performance.md.)
const selfCheck = time.Second

// record is the record written into the lock file.
func (h *heldFile) record() Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	return *h.info
}

// markLost says this lock was lost (each device of a set that is), then
// closes the Held's Lost, once: the log line comes before anyone told by
// Lost acts.
func (h *heldFile) markLost(why error) {
	h.o.Logger.Error("GPU lock lost", "path", h.o.Path, "reason", why)
	h.lost.Mark(why, nil)
}

// heartbeat touches the lock every Options.Heartbeat, and checks that it
// is still ours within selfCheck of the lock file being removed or
// replaced: a forced clear, or the seed's tool clearing it by its mtime, is
// noticed within a second, not a heartbeat later.
func (h *heldFile) heartbeat() {
	defer close(h.done)
	t := time.NewTicker(h.o.Heartbeat)
	defer t.Stop()
	self := time.NewTicker(selfCheck)
	defer self.Stop()
	for {
		step := h.touch
		select {
		case <-h.stop:
			return
		case <-t.C:
		case <-self.C:
			var err error
			if h.share != nil || h.cover {
				err = h.adopt()
			}
			if err != nil && h.beat.Err() == nil {
				h.o.Logger.Debug("could not name this holder in the shared record", "path", h.o.Path, "error", err)
			}
			if h.looksOurs() {
				continue
			}
			step = h.confirmOurs
		}
		if err := step(); err != nil {
			if h.beat.Err() != nil {
				return // stopped while it waited for the guard
			}
			if errors.Is(err, errNotOurs) {
				h.markLost(err)
				return
			}
			h.o.Logger.Warn("GPU lock heartbeat failed; retrying at the next one", "path", h.o.Path, "error", err)
		}
	}
}

// underGuard runs fn with the guard held, waiting for it at most
// clearGuardWait, or until parent ends.
func (h *heldFile) underGuard(parent context.Context, fn func() error) error {
	ctx, cancel := context.WithTimeout(parent, clearGuardWait)
	defer cancel()
	g, err := takeGuard(ctx, h.o.Path)
	if err != nil {
		return err
	}
	defer g.release()
	return fn()
}

// looksOurs reports whether the lock file, read without the guard, still
// holds this holder's record; check then judges under the guard any that
// does not seem to.
func (h *heldFile) looksOurs() bool {
	st, err := readStatus(h.o.Path)
	return err == nil && h.whyNotOurs(st) == nil
}

// confirmOurs reads the lock under the guard and reports errNotOurs if it is no
// longer this holder's.
func (h *heldFile) confirmOurs() error {
	return h.underGuard(h.beat, func() error {
		_, err := h.readOurs()
		return err
	})
}

// errNotOurs says the lock file no longer holds our record.
var errNotOurs = errors.New("the lock file no longer holds this process's record")

// readOurs reads the lock under the guard and checks it is still readOurs.
func (h *heldFile) readOurs() (*Status, error) {
	st, err := readStatus(h.o.Path)
	if err != nil {
		return nil, err
	}
	return st, h.whyNotOurs(st)
}

// whyNotOurs says whether st, as read, is this holder's record.
func (h *heldFile) whyNotOurs(st *Status) error {
	if st.State == StateFree {
		return fmt.Errorf("%w: it was removed", errNotOurs)
	}
	mine := h.record()
	shared := h.share != nil || h.cover
	if shared && st.Info != nil && st.Info.Token == mine.Token && st.Info.Share == (h.share != nil) && st.Info.Cover == h.cover {
		return nil // a shared record (or a cover) names any of its holders
	}
	if st.Info == nil || st.Info.Token != mine.Token || st.Info.PID != mine.PID || shared {
		return fmt.Errorf("%w: it now names %s", errNotOurs, st.Holder())
	}
	return nil
}

// touch is one heartbeat: set the lock file's mtime to now if it is ours.
// The file is read and touched through one open file, so that the file
// touched is the one found to be ours, whatever the path names meanwhile.
func (h *heldFile) touch() error {
	return h.underGuard(h.beat, func() error {
		var f *os.File
		err := osfile.RetrySharing(func() (err error) {
			f, err = osfile.OpenToTouch(h.o.Path)
			return err
		})
		if errors.Is(err, fs.ErrNotExist) {
			return h.whyNotOurs(&Status{State: StateFree})
		}
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := readStatusFrom(f, h.o.Path)
		if err != nil {
			return err
		}
		if err := h.whyNotOurs(st); err != nil {
			return err
		}
		now := time.Now()
		if err := osfile.Touch(f, now); err != nil {
			return err
		}
		h.touchOwn(now)
		return nil
	})
}

// touchOwn sets the mtime of the files that this holder alone writes, its
// liveness file (not a shared record's, which is everyone's) and its
// sidecar, to now at each heartbeat: once their kernel lock is free, a
// note in them that is not their owner's word keeps the lock held only
// while they are fresh (see sweep, readSharer), so their mtime must say
// when their holder was last alive. A failure is only logged: the record's
// heartbeat is what the lock lives by.
func (h *heldFile) touchOwn(now time.Time) {
	var files []*os.File
	if h.live != nil && !h.live.shared {
		files = append(files, h.live.f)
	}
	if h.share != nil {
		files = append(files, h.share.f)
	}
	for _, f := range files {
		if err := osfile.Touch(f, now); err != nil {
			h.o.Logger.Debug("could not touch a liveness file or sidecar", "path", h.o.Path, "error", err)
		}
	}
}

// recordChild writes the process group of the job run under the lock into
// the record (childPgid). It also counts as a heartbeat.
func (h *heldFile) recordChild(g jobGroup) error {
	switch {
	case h.share != nil:
		return h.noteShare(func(s *Sharer) { s.ChildPGID, s.ChildStart = g.id, g.since })
	case h.cover:
		return h.noteCoverChild(g)
	}
	return h.underGuard(context.Background(), func() error {
		if _, err := h.readOurs(); err != nil {
			return err
		}
		h.mu.Lock()
		next := *h.info
		next.ChildPGID, next.ChildStart = g.id, g.since
		h.mu.Unlock()
		if err := replaceRecord(h.o.Path, &next); err != nil {
			return err
		}
		h.mu.Lock()
		h.info = &next
		h.mu.Unlock()
		return nil
	})
}
