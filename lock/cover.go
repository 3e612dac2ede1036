package lock

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/gpuexec/gpuexec/internal/lost"
	"github.com/gpuexec/gpuexec/internal/proc"
)

// One card, one lock: the lock at a path (gpu.lock, "plain") stands for
// every GPU of the machine, and each device's lock beside it (gpu0.lock,
// gpu1.lock: see Options.Devices) for one of them. So that two jobs are
// never on one card whichever way each named it:
//
//   - a plain holder takes the lock at the path only while no device lock
//     beside it is held (each is judged under its own guard, inside the
//     path's, at every try);
//   - a device holder takes device locks only while the lock at the path
//     is free or is a cover, which it then creates or joins: a record in
//     the seed's format with "cover": true, so that the seed's Node tool,
//     which knows only the path, sees the machine busy while any device is
//     held, and plain jobs of older gpuexec versions wait too;
//   - the cover is shared like a shared record (see share.go): every device
//     holder holds its liveness file with a shared kernel lock, which its
//     job inherits; its pid names one of them, rewritten by whoever finds
//     that pid gone, and handed on by the one that leaves; the last one
//     to leave (no device lock beside it held any more) removes it.
//
// Every step runs under the path's guard, which every plain and device
// holder takes first (a device lock named by its own path is taken as
// device N of the lock it is beside: see Options.Canonical), so the steps of the
// two kinds never interleave.

// clearStaleBeside judges, for a plain lock at o.Path (whose guard the
// caller holds), every device lock beside it under its own guard, which is
// kept, clearing the stale ones: it returns those held (each named by its
// device) and the guards, which the caller releases.
func clearStaleBeside(ctx context.Context, o Options) (held []*Status, guards []*guard, err error) {
	paths, names, err := devicesBeside(o.Path)
	if err != nil {
		return nil, nil, err
	}
	for i, p := range paths {
		st, g, err := clearStaleGuarded(ctx, o, p)
		if err != nil {
			releaseGuards(guards)
			return nil, nil, err
		}
		guards = append(guards, g)
		if st.State != StateFree {
			st.Device = names[i]
			held = append(held, st)
		}
	}
	return held, guards, nil
}

// inspectBeside is clearStaleBeside that changes nothing and takes no guard:
// the device locks held beside the plain lock at o.Path, as judged now.
func inspectBeside(o Options) []*Status {
	return slices.DeleteFunc(judgeBeside(o), func(st *Status) bool { return st.State == StateFree })
}

// judgeBeside reads and judges, changing nothing and taking no guard, every
// device lock beside the plain lock at o.Path (see devicesBeside: the
// folder's names are only matched), each named by its device, in guard
// order; one that cannot be read is left out.
func judgeBeside(o Options) []*Status {
	paths, names, err := devicesBeside(o.Path)
	if err != nil {
		return nil
	}
	var seen []*Status
	for i, p := range paths {
		if st, err := inspectOne(p, o.Stale); err == nil {
			st.Device = names[i]
			seen = append(seen, st)
		}
	}
	return seen
}

// coverBlocks reports whether the lock at a device set's path, as judged
// under its guard (st), keeps its devices from being taken: anything there but a cover
// held by this host's device holders (a plain holder, a plain sharer, the
// seed's tool, a record being written, a job whose record was removed).
func coverBlocks(st *Status) bool {
	return st.State != StateFree && !joinableCover(st)
}

// joinableCover reports whether st is a cover that a device holder may
// join: a held cover whose liveness lock is held in this kernel (whatever
// host name it gives: another container of this machine), or one of this
// host's held only by a gone holder's job (that job's device is held by its
// own lock; the cover only keeps plain holders and the seed's tool out).
func joinableCover(st *Status) bool {
	return st.State == StateHeld && st.Orphan == "" && st.Info != nil && st.Info.Cover &&
		!st.Info.Share && (st.Reason == "" || sameHost(st.Info.Host))
}

// takeCover creates (when the lock at o.Path, judged as st, is free) or
// joins (when it is a cover) the cover of a device set's holder, with its
// shared liveness lock. Call with the path's guard held.
func takeCover(o Options, st *Status, ls *lost.Signal) (*heldFile, error) {
	if st.State == StateFree {
		info := newInfo(o)
		info.Cover = true
		live, err := takeLiveShared(o.Path, info.Token)
		if err != nil {
			return nil, err
		}
		if err := createRecord(o.Path, info); err != nil {
			live.release()
			return nil, err
		}
		return newHeldCover(o, info, live, ls), nil
	}
	live, err := joinLive(o.Path, st.Info.Token)
	if err != nil {
		// Its liveness file is gone or cannot be locked (removed by
		// hand): a cover nobody can join, which this holder replaces.
		// The devices beside it are held by their own locks.
		if rerr := removeIfSame(o.Path, st); rerr != nil {
			return nil, rerr
		}
		o.Logger.Warn("replaced a cover whose liveness file cannot be joined", "path", o.Path, "error", err)
		return takeCover(o, &Status{Path: o.Path, State: StateFree}, ls)
	}
	info := *st.Info
	return newHeldCover(o, &info, live, ls), nil
}

func newHeldCover(o Options, info *Info, live *liveLock, ls *lost.Signal) *heldFile {
	return newHeldFile(o, info, live, nil, ls, true)
}

// me is this holder as a shared record or a cover names it: its pid,
// owner, slug, host, start, and its job's group once told.
func (l *heldFile) me() Info {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.share != nil {
		return l.share.me.holder()
	}
	selfStartOnce.Do(findSelfStart)
	return Info{PID: os.Getpid(), Owner: l.o.Owner, Slug: l.o.Slug, Host: proc.HostName(), PIDStart: selfStart,
		ChildPGID: l.group.id, ChildStart: l.group.since}
}

// noteCoverChild writes the job's group into the cover when it names this
// holder (for status, and for the seed's tool nothing: it reads the pid).
// Call without the guard.
func (l *heldFile) noteCoverChild(g jobGroup) error {
	l.mu.Lock()
	l.group = g
	l.mu.Unlock()
	return l.underGuard(l.beat, func() error {
		st, err := l.readOurs()
		if err != nil || st.Info.PID != os.Getpid() || (st.Info.ChildPGID == g.id && st.Info.ChildStart == g.since) {
			return err
		}
		return l.nameInRecord(*st.Info, l.me())
	})
}

// leaveCover is a device holder's release of its cover, under the path's
// guard (or without it when it cannot be had), once its devices are
// released: when no device lock beside the path is held any more, the
// cover and its liveness file go; else, when the cover names this holder,
// it is rewritten to name another device holder. It reports whether the
// cover was removed.
func (l *heldFile) leaveCover() (bool, error) {
	others := inspectBeside(l.o)
	if len(others) == 0 {
		removed, err := l.removeRecordNow()
		l.live.release()
		return removed, err
	}
	defer l.live.drop()
	st, err := l.readOurs()
	if err != nil || st.Info.PID != os.Getpid() {
		return false, nil
	}
	i := slices.IndexFunc(others, func(o *Status) bool { return o.Info != nil && o.Info.PID != os.Getpid() })
	if i < 0 {
		return false, nil
	}
	if err := l.nameInRecord(*st.Info, *others[i].Info); err != nil {
		return false, fmt.Errorf("lock: handing the cover on: %w", err)
	}
	return false, nil
}
