package lock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/gpuexec/gpuexec/internal/lost"
)

// maxAttempts bounds how often one attempt re-tries after clearing a stale
// lock or finding the lock released under it.
const maxAttempts = 4

// attempt makes one try for t's locks under the queue's guard (o.Path's),
// from where ws stands (see waitState; one that is queued gets a ticket now
// if it has none, or anew if its ticket was pruned because its waiter
// stopped for longer than Options.Stale). Every lock file is judged, and
// cleared if stale, under its own guard, which is kept until the try ends
// (for a single lock that is the queue's), so that the free ones stay free among gpuexec processes until
// they are created; a stale lock is cleared whatever the caller's place.
// With t.need of them free it takes them, at the head of the queue or
// passing heads that left them free (ws.mayPass), all at once or none. It
// returns the held lock, or nil and the locks as seen.
func attempt(ctx context.Context, o Options, t lockSet, ws *waitState) (*Held, []*Status, error) {
	if ws.tk == nil {
		// With devices the queue's path is no lock, but a user's --lock:
		// what is there must be a lock file too, or nothing.
		for _, p := range t.checked(o.Path) {
			if err := refuseNonLock(p); err != nil {
				return nil, nil, err
			}
		}
	}
	g, err := takeGuard(ctx, o.Path)
	if err != nil {
		return nil, nil, err
	}
	defer g.release()
	before, err := queuePlace(g, o, ws)
	if err != nil {
		return nil, nil, err
	}
	var seen []*Status
	ws.ahead, ws.canBackfill = nil, false
	for range maxAttempts {
		var guards []*guard
		if seen, guards, err = clearStaleSet(ctx, o, t); err != nil {
			return nil, nil, err
		}
		// One card, one lock (see cover.go): the plain lock and the
		// device locks beside it keep each other from being taken.
		var cover *Status
		var blockers []*Status
		if t.names == nil && !plainHeld(seen[0]) {
			// (A plain lock held for itself is waited for first: its
			// devices cannot be taken meanwhile.)
			var inner []*guard
			if blockers, inner, err = clearStaleBeside(ctx, o); err != nil {
				releaseGuards(guards)
				return nil, nil, err
			}
			guards = append(guards, inner...)
		} else if t.names != nil {
			if cover, err = clearStale(o, o.Path); err != nil {
				releaseGuards(guards)
				return nil, nil, err
			}
			if coverBlocks(cover) {
				blockers = []*Status{cover}
			}
		}
		ws.onPurpose = before <= ws.mayPass && len(blockers) > 0
		if len(blockers) > 0 {
			releaseGuards(guards)
			return nil, append(seen, blockers...), nil
		}
		var free []int
		for i, st := range seen {
			if st.State == StateFree || (o.ShareMiB > 0 && joinable(st)) {
				free = append(free, i)
			}
		}
		backfill := before > ws.mayPass && ws.mayBackfill(o, t, seen)
		if backfill {
			free = []int{0}
		}
		if (o.Admit != nil || o.ShareMiB > 0) && (before <= ws.mayPass || backfill) {
			free = ws.admit(o, free, seen)
		}
		if (before > ws.mayPass && !backfill) || len(free) < t.need {
			ws.onPurpose = before <= ws.mayPass && len(free) > 0
			releaseGuards(guards)
			return nil, seen, nil
		}
		// A sharer joins shared devices before it takes a free one:
		// sharers pack, leaving whole devices for those who need one.
		slices.SortStableFunc(free, func(a, b int) int {
			return boolRank(seen[b].State != StateFree) - boolRank(seen[a].State != StateFree)
		})
		h, err := create(o, t, free[:t.need], seen, cover)
		releaseGuards(guards)
		if errors.Is(err, os.ErrExist) {
			continue // someone outside the queue (the Node tool) was faster
		}
		if err != nil {
			return nil, nil, err
		}
		if backfill {
			a := ws.admittedAhead
			o.Logger.Info(fmt.Sprintf("started ahead of %s: ends before it can start", a.who()),
				"path", o.Path, "passed", a.Waiters, "ends_by", a.Ends.UTC().Format(isoMillis))
		} else if before > 0 {
			what, it := "the free GPU lock", "it"
			if t.names != nil {
				what, it = "free GPUs", "them"
			}
			o.Logger.Warn(fmt.Sprintf("took %s ahead of %d waiter(s) that left %s untaken for %s (stopped?); they keep their places", what, before, it, headGrace), "path", o.Path)
		}
		// A holder of one lock keeps its ticket until its job has
		// started (see Held.leaveQueueLater): the lock it holds is all that the
		// ticket waits for. A device set's ticket would hold up the
		// waiters for its other devices, and a sharer's those who may
		// join it: theirs goes now.
		if t.names != nil || o.ShareMiB > 0 {
			ws.leave()
		}
		return h, nil, nil
	}
	return nil, seen, nil
}

// clearStaleSet judges each of t's lock files under its own guard (the
// queue's, held by the caller, for a single lock), clearing the stale ones
// (see clearStale), and returns them as seen and the guards taken, which
// the caller releases. The guards are taken in one order for everyone (by
// path, ignoring case, as a case-insensitive filesystem does), so that two
// processes naming the same devices in another order, or through another
// queue, never hold one each and wait for the other.
func clearStaleSet(ctx context.Context, o Options, t lockSet) ([]*Status, []*guard, error) {
	seen := make([]*Status, len(t.paths))
	var guards []*guard
	for _, i := range t.guardOrder() {
		st, g, err := clearStaleGuarded(ctx, o, t.paths[i])
		if err != nil {
			releaseGuards(guards)
			return nil, nil, err
		}
		if g != nil {
			guards = append(guards, g)
		}
		if t.names != nil {
			st.Device = t.names[i]
		}
		seen[i] = st
	}
	return seen, guards, nil
}

// clearStaleGuarded judges the lock file at path under its own guard,
// clearing it if stale (see clearStale), and returns it with that guard,
// which the caller keeps until its try ends; no guard for the lock at
// o.Path, whose guard the caller holds already.
func clearStaleGuarded(ctx context.Context, o Options, path string) (*Status, *guard, error) {
	var g *guard
	if path != o.Path {
		var err error
		if g, err = takeInnerGuard(ctx, path); err != nil {
			return nil, nil, err
		}
	}
	st, err := clearStale(o, path)
	if err != nil {
		g.release()
		return nil, nil, err
	}
	return st, g, nil
}

// create takes the locks t.paths[idx...], all or none: for each, the
// liveness lock, then the record; for a device set, the cover of the lock
// at o.Path first (cover: that lock as judged, free or a cover to join).
// Call with every guard held and the locks judged free.
func create(o Options, t lockSet, idx []int, seen []*Status, cover *Status) (*Held, error) {
	h := &Held{o: o, lost: lost.New()}
	if t.names != nil {
		var err error
		if h.cover, err = takeCover(o, cover, h.lost); err != nil {
			return nil, err
		}
	}
	for _, i := range idx {
		var l *heldFile
		var err error
		if o.ShareMiB > 0 && seen[i].State != StateFree {
			l, err = joinOne(o, seen[i], h.lost)
		} else {
			l, err = createOne(o, t.paths[i], h.lost)
		}
		if err != nil {
			// Roll back under the guards the caller holds.
			for _, got := range append(h.locks, h.cover) {
				if got != nil {
					got.stopHeartbeat()
					got.removeGuarded()
				}
			}
			return nil, err
		}
		h.locks = append(h.locks, l)
		if t.names != nil {
			h.devices = append(h.devices, t.names[i])
		}
	}
	if heldTaken != nil {
		heldTaken(h)
	}
	return h, nil
}

// createOne takes the liveness lock of the lock file at path, then creates
// its record.
func createOne(o Options, path string, ls *lost.Signal) (*heldFile, error) {
	info := newInfo(o)
	if o.ShareMiB > 0 {
		live, sh, err := createShared(o, path, info)
		if err != nil {
			return nil, err
		}
		o.Path = path
		return newHeldFile(o, info, live, sh, ls, false), nil
	}
	live, err := takeLive(path, info.Token)
	if err != nil {
		return nil, err
	}
	if err := createRecord(path, info); err != nil {
		live.release()
		return nil, err
	}
	o.Path = path
	return newHeldFile(o, info, live, nil, ls, false), nil
}

// joinOne joins, as a sharer, the shared lock seen as st (judged under
// the guards held).
func joinOne(o Options, st *Status, ls *lost.Signal) (*heldFile, error) {
	live, sh, err := joinShared(o, st)
	if err != nil {
		return nil, err
	}
	info := *st.Info
	o.Path = st.Path
	return newHeldFile(o, &info, live, sh, ls, false), nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// refuseNonLock refuses, before anything is created beside it (the guard,
// a ticket), a lock path that is no lock gpuexec may use: not a regular
// file, or a file that is not a lock record (see ErrNotLock). A missing
// file is no error. It is checked until the caller has a ticket; after
// that, clearStale refuses such a file just the same.
func refuseNonLock(path string) error {
	_, err := readStatus(path)
	return err
}

// queuePlace makes sure a queued caller has a ticket and returns how many
// live rival waiters are ahead of it, setting ws.pos (0 when not queued).
// Call with the guard held.
func queuePlace(g *guard, o Options, ws *waitState) (before int, err error) {
	if ws.queued {
		if ws.tk != nil && !ws.tk.exists() {
			o.Logger.Warn("this waiter's queue ticket was pruned; queueing again at the back", "path", o.Path)
			ws.tk.drop()
			ws.tk = nil
		}
		if ws.tk == nil {
			if ws.tk, err = takeTicket(g, o, ws.q); err != nil {
				return 0, err
			}
		}
	}
	if before, err = ahead(ws.q, ws.seq(), o.Stale); err != nil {
		return 0, err
	}
	ws.pos = 0
	if ws.queued {
		ws.pos = before + 1
	}
	return before, nil
}

// leave drops the caller's ticket once it holds the lock.
func (ws *waitState) leave() {
	ws.tk.drop()
	ws.tk = nil
}

// clearStale reads the lock at path and clears it if it is stale (logging
// why), returning it free or held. A lock that keeps changing under it is
// returned as last judged. A lock whose record is gone counts as held while
// a liveness file beside it is still locked: the job of a holder whose
// record was removed (clear --force) still runs. Call with the guard held.
func clearStale(o Options, path string) (*Status, error) {
	var st *Status
	for range maxAttempts {
		var err error
		if st, err = readStatus(path); err != nil {
			return nil, err
		}
		if st.State == StateFree {
			if busy := sweep(path, o.Stale); busy != nil {
				return busy, nil
			}
			return st, nil
		}
		judgeLock(st, o.Stale, true)
		if st.State == StateHeld {
			return st, nil
		}
		err = removeIfSame(path, st)
		if errors.Is(err, errChanged) {
			o.Logger.Warn("GPU lock changed while clearing it as stale; judging it again", "path", path, "error", err)
			continue
		}
		if err != nil {
			return nil, explainClear(path, st, err)
		}
		if st.Info != nil {
			removeDeadLive(path, st.Info.Token)
		}
		o.Logger.Warn("cleared stale GPU lock", "path", path, "holder", st.Holder(), "reason", st.Reason)
	}
	return st, nil
}
