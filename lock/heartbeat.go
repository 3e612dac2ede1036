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
	"github.com/gpuexec/gpuexec/internal/osfile"
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
	l := &heldFile{
		o:     o,
		info:  info,
		live:  live,
		share: share,
		cover: cover,

		lost: ls,
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	l.beat, l.beatEnded = context.WithCancel(context.Background())
	go l.heartbeat()
	return l
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
func (l *heldFile) record() Info {
	l.mu.Lock()
	defer l.mu.Unlock()
	return *l.info
}

// markLost says this lock was lost (each device of a set that is), then
// closes the Held's Lost, once: the log line comes before anyone told by
// Lost acts.
func (l *heldFile) markLost(why error) {
	l.o.Logger.Error("GPU lock lost", "path", l.o.Path, "reason", why)
	l.lost.Mark(why, nil)
}

// heartbeat touches the lock every Options.Heartbeat, and checks that it
// is still ours within selfCheck of the lock file being removed or
// replaced: a forced clear, or the seed's tool clearing it by its mtime, is
// noticed within a second, not a heartbeat later.
func (l *heldFile) heartbeat() {
	defer close(l.done)
	t := time.NewTicker(l.o.Heartbeat)
	defer t.Stop()
	self := time.NewTicker(selfCheck)
	defer self.Stop()
	for {
		step := l.touch
		select {
		case <-l.stop:
			return
		case <-t.C:
		case <-self.C:
			var err error
			if l.share != nil || l.cover {
				err = l.adopt()
			}
			if err != nil && l.beat.Err() == nil {
				l.o.Logger.Debug("could not name this holder in the shared record", "path", l.o.Path, "error", err)
			}
			if l.looksOurs() {
				continue
			}
			step = l.confirmOurs
		}
		if err := step(); err != nil {
			if l.beat.Err() != nil {
				return // stopped while it waited for the guard
			}
			if errors.Is(err, errNotOurs) {
				l.markLost(err)
				return
			}
			l.o.Logger.Warn("GPU lock heartbeat failed; retrying at the next one", "path", l.o.Path, "error", err)
		}
	}
}

// underGuard runs fn with the guard held, waiting for it at most
// clearGuardWait, or until parent ends.
func (l *heldFile) underGuard(parent context.Context, fn func() error) error {
	ctx, cancel := context.WithTimeout(parent, clearGuardWait)
	defer cancel()
	g, err := takeGuard(ctx, l.o.Path)
	if err != nil {
		return err
	}
	defer g.release()
	return fn()
}

// looksOurs reports whether the lock file, read without the guard, still
// holds this holder's record; check then judges under the guard any that
// does not seem to.
func (l *heldFile) looksOurs() bool {
	st, err := readStatus(l.o.Path)
	return err == nil && l.whyNotOurs(st) == nil
}

// confirmOurs reads the lock under the guard and reports errNotOurs if it is no
// longer this holder's.
func (l *heldFile) confirmOurs() error {
	return l.underGuard(l.beat, func() error {
		_, err := l.readOurs()
		return err
	})
}

// errNotOurs says the lock file no longer holds our record.
var errNotOurs = errors.New("the lock file no longer holds this process's record")

// readOurs reads the lock under the guard and checks it is still readOurs.
func (l *heldFile) readOurs() (*Status, error) {
	st, err := readStatus(l.o.Path)
	if err != nil {
		return nil, err
	}
	return st, l.whyNotOurs(st)
}

// whyNotOurs says whether st, as read, is this holder's record.
func (l *heldFile) whyNotOurs(st *Status) error {
	if st.State == StateFree {
		return fmt.Errorf("%w: it was removed", errNotOurs)
	}
	mine := l.record()
	shared := l.share != nil || l.cover
	if shared && st.Info != nil && st.Info.Token == mine.Token && st.Info.Share == (l.share != nil) && st.Info.Cover == l.cover {
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
func (l *heldFile) touch() error {
	return l.underGuard(l.beat, func() error {
		var f *os.File
		err := osfile.RetrySharing(func() (err error) {
			f, err = osfile.OpenToTouch(l.o.Path)
			return err
		})
		if errors.Is(err, fs.ErrNotExist) {
			return l.whyNotOurs(&Status{State: StateFree})
		}
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := readStatusFrom(f, l.o.Path)
		if err != nil {
			return err
		}
		if err := l.whyNotOurs(st); err != nil {
			return err
		}
		now := time.Now()
		if err := osfile.Touch(f, now); err != nil {
			return err
		}
		l.touchOwn(now)
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
func (l *heldFile) touchOwn(now time.Time) {
	var files []*os.File
	if l.live != nil && !l.live.shared {
		files = append(files, l.live.f)
	}
	if l.share != nil {
		files = append(files, l.share.f)
	}
	for _, f := range files {
		if err := osfile.Touch(f, now); err != nil {
			l.o.Logger.Debug("could not touch a liveness file or sidecar", "path", l.o.Path, "error", err)
		}
	}
}

// recordChild writes the process group of the job run under the lock into
// the record (childPgid). It also counts as a heartbeat.
func (l *heldFile) recordChild(g jobGroup) error {
	switch {
	case l.share != nil:
		return l.noteShare(func(s *Sharer) { s.ChildPGID, s.ChildStart = g.id, g.since })
	case l.cover:
		return l.noteCoverChild(g)
	}
	return l.underGuard(context.Background(), func() error {
		if _, err := l.readOurs(); err != nil {
			return err
		}
		l.mu.Lock()
		next := *l.info
		next.ChildPGID, next.ChildStart = g.id, g.since
		l.mu.Unlock()
		if err := replaceRecord(l.o.Path, &next); err != nil {
			return err
		}
		l.mu.Lock()
		l.info = &next
		l.mu.Unlock()
		return nil
	})
}
