package lock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuexec/gpuexec/internal/lost"
	"github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/lock/internal/osfile"
)

// The acquisition core: one path for a single lock and for a device set (a
// single lock is the device set whose one lock file is the anchor itself).
// A try (attempt) runs under the anchor's guard: it takes or keeps a ticket
// (queuePlace), settles every lock file (clearing stale ones), and takes
// the locks only at the head of the queue. Between tries a waiter sleeps in
// waitForChange until something it waits for may have changed.

// place is a waiter's place in the queue between its tries: the queue as
// it sees it, its ticket (nil until it has one), its position at the last
// try, and what it knows of a head that does not take a free lock.
type place struct {
	q      *queue
	queued bool // it takes a ticket (Acquire); TryAcquire does not
	tk     *ticket
	pos    int // 1 for the head; 0 when not queued
	// pass is how many live waiters ahead this try may pass: those
	// that left the lock free for longer than headGrace each (see
	// waitForChange).
	pass int
	// freeSince is when this waiter, behind the head, first found a
	// lock it waits for free and not taken; zero when it did not.
	freeSince time.Time
	// With Options.Admit: refused are the free locks (indexes into the
	// target's paths) the last try could have taken but for Admit, which
	// is asked about them next; admitted are those Admit let through,
	// for the next try only; why is what Admit said was in the way, until
	// a try finds nothing to ask about.
	refused  []int
	admitted []bool
	why      string
	// admittedWith are, per lock, the sharers' budgets Admit was told
	// of (Options.AdmitShare).
	admittedWith []int64
	// tryWait, when set (TryAcquire), bounds each try's wait for the
	// guards on its own, so that the time Admit takes between two
	// tries does not count against it.
	tryWait time.Duration
	// onPurpose says the last try, at the head of the queue, left locks
	// that others wait for free on purpose: it waits for a lock beside
	// them (a plain lock for a device held, devices for a plain holder)
	// or for more of them (Need). It then tends its ticket, as a head
	// that Admit holds up does, so that those behind do not pass it.
	onPurpose bool
}

func (pl *place) seq() uint64 {
	if pl.tk == nil {
		return 0
	}
	return pl.tk.seq
}

// queueFor is Acquire's waiting loop: one try without a ticket (the common
// case, a free lock and nobody queued, needs no ticket and no watch), then
// a ticket and tries whenever something may have changed, until a try gets
// the lock, ctx ends, or an error. The release of any of t's lock files
// wakes it.
func queueFor(ctx context.Context, o Options, t target) (*Held, error) {
	start := time.Now()
	if err := makeFolder(filepath.Dir(o.Path)); err != nil {
		return nil, err
	}
	pl := &place{q: newQueue(o.Path, t.paths)}
	// Admit is asked only from a place in the queue (a ticket): it takes
	// a while, and whoever comes meanwhile must queue behind this waiter,
	// not take the free lock from under it. The first try without a
	// ticket then takes nothing that Admit would be asked about.
	first := attemptAdmitted
	if o.Admit != nil || (o.ShareMiB > 0 && o.AdmitShare != nil) {
		first = attempt
	}
	h, seen, err := first(ctx, o, t, pl)
	switch {
	case err != nil && ctx.Err() != nil:
		seen, _ = inspectSeen(o, t)
		return nil, &WaitError{Seen: seen, Waited: time.Since(start), Why: pl.why, Err: ctx.Err()}
	case err != nil:
		return nil, err
	case h != nil:
		h.logAcquired(time.Since(start))
		return h, nil
	}
	// Watch before the next look, so that no release goes unnoticed.
	wk, werr := newWaker(o.Path, t.paths)
	if werr != nil {
		o.Logger.Debug("cannot watch the lock's folder; polling", "path", o.Path, "poll", o.Poll, "error", werr)
	}
	// Once the lock is had, the ticket and the watch are let go of
	// beside the job's start, not before it (see Held.retire).
	keep := false
	defer func() {
		if !keep {
			wk.close()
		}
	}()
	// What the record says of this process is the same at every try:
	// work it out while waiting, not when the lock is handed over.
	proc.HostName()
	selfStartOnce.Do(findSelfStart)

	pl.queued = true
	defer func() { pl.tk.drop() }()
	rep := newReporter(ctx, o, t, pl, start)
	defer rep.stop()
	poll := time.NewTimer(o.Poll)
	defer poll.Stop()
	for {
		last := seen
		h, seen, err = attemptAdmitted(ctx, o, t, pl)
		pl.pass = 0
		if seen == nil {
			seen = last // a try cut short by ctx saw nothing new
		}
		if err != nil {
			if ctx.Err() != nil {
				if seen == nil {
					seen, _ = inspectSeen(o, t)
				}
				return nil, &WaitError{Seen: seen, Waited: time.Since(start), Why: pl.why, Err: ctx.Err()}
			}
			return nil, err
		}
		if h != nil {
			h.retire(pl.tk, wk)
			pl.tk, keep = nil, true
			h.logAcquired(time.Since(start))
			return h, nil
		}
		rep.first(seen)
		poll.Reset(o.Poll)
		if !waitForChange(ctx, o, seen, pl, wk, poll, rep) || ctx.Err() != nil {
			return nil, &WaitError{Seen: seen, Waited: time.Since(start), Why: pl.why, Err: ctx.Err()}
		}
		pl.tk.touch(o.Heartbeat)
	}
}

// livenessProbe is how often a waiter checks whether the holder's job is
// gone (its liveness lock free, or for the seed's records its pid gone): a
// non-blocking kernel-lock test or kill(pid, 0), a few microseconds each.
const livenessProbe = 100 * time.Millisecond

// headGrace is how long the head of the queue may leave a free lock
// untaken before the waiter behind it takes it instead. A live head takes a
// released lock within milliseconds; one that does not is stopped (Ctrl+Z,
// SIGSTOP, a debugger) or starved, and must not keep the GPU idle while
// others wait. It keeps its ticket, and with it its place at the front
// once it runs again. Each further waiter behind passes one more such head
// after one more headGrace, so that live waiters keep their order.
const headGrace = 2 * time.Second

// passCheck is how often the waiter just behind the head looks whether a
// lock it waits for is free (see passHeads) where the folder is watched; a
// free lock found is then passed at the very moment its grace ends,
// counted from when the folder last changed. Waiters further back look
// less often (passEvery).
const passCheck = time.Second

// maxPassCheck bounds how seldom a waiter looks (see passEvery).
const maxPassCheck = 10 * time.Second

// passEvery is how often a waiter at place pos (2 is just behind the head)
// looks whether a lock it waits for is free. It passes such a lock only
// once it has been left free for (pos-1) headGraces, counted from when the
// folder last changed, so a look every (pos-1) passChecks, half that, still
// passes on time; at most maxPassCheck, so that a place known only roughly
// (several ahead left at once) is not looked after for long. A hundred
// waiters then wake about twelve times a second together, not a hundred.
func passEvery(pos int) time.Duration {
	return min(time.Duration(max(pos-1, 1))*passCheck, maxPassCheck)
}

// waitForChange blocks until something may have changed for the waiter at
// pl: for the head of the queue, a release seen in the folder or a holder
// gone (its liveness file's last close, or the liveness probe); for a
// waiter behind it, the live rival ticket just ahead of its own leaving
// the queue or its waiter gone (the ticket's removal or last close, or the
// probe), none live left ahead (it is the head now), or a lock it waits for
// left free by the waiters ahead for long enough to pass them (see
// headGrace); for any, a lock turning stale or the poll timer. Releases do
// not wake a waiter behind the head: the head takes the lock, and waking
// the others would only cost them CPU at every handoff.
//
// Where the folder is watched (Linux) nothing wakes a waiter between
// events but the look for a free lock behind the head (passEvery) and the
// poll: waiting costs next to no CPU whatever the queue's length. The
// liveness probe (every livenessProbe) remains for what cannot be watched:
// no watch at all, a holder without a liveness file (the Node tool's), one
// whose liveness lock is free while its job's process group still runs.
// The waiting line is logged when rep says it is due, without a try. It
// returns false when ctx ends.
func waitForChange(ctx context.Context, o Options, seen []*Status, pl *place, wk *waker, poll *time.Timer, rep *reporter) bool {
	// A lock turns stale at a known time (a record never written, a
	// heartbeat that stopped): look again then, not a poll later.
	var staleC <-chan time.Time
	if at, ok := turnsStale(o, seen); ok {
		t := time.NewTimer(time.Until(at) + staleMargin)
		defer t.Stop()
		staleC = t.C
	}
	seq := pl.seq()
	head := pl.pos <= 1 || seq == 0
	if pl.why != "" {
		// Free locks that Admit refused: ask again a moment later,
		// tending the ticket so that those behind do not pass.
		return pl.awaitAdmission(ctx, poll, rep)
	}
	probing := !wk.closes()
	var ahead string // the ticket this waiter follows, behind the head
	if head && pl.onPurpose && pl.queued {
		defer pl.tend()()
	}
	if head {
		pl.freeSince = time.Time{}
		if wk.watchReleases() {
			// The folder was not watched until now: a release
			// before then went unseen.
			if _, free := look(o, seen); free {
				return true
			}
		}
		if !probing {
			probing = !watchHolders(wk, seen)
		}
	} else if ahead = follow(pl, wk); ahead == "" {
		return true
	}
	var probeC, passC <-chan time.Time
	var pass *time.Timer
	if probing {
		t := time.NewTicker(livenessProbe)
		defer t.Stop()
		probeC = t.C
	} else if !head {
		pass = time.NewTimer(passEvery(pl.pos))
		defer pass.Stop()
		passC = pass.C
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-staleC:
			return true
		case <-wk.C():
			if head {
				return true
			}
		case <-wk.Left():
			if head {
				continue
			}
			was := ahead
			if ahead = follow(pl, wk); ahead == "" {
				return true // nobody live ahead: the head now
			}
			if ahead != was {
				// A waiter ahead left: one place nearer the
				// front at least (places only ever fall).
				pl.freeSince = time.Time{}
				pl.pos = max(pl.pos-1, 2)
				if pass != nil {
					pass.Reset(passEvery(pl.pos))
				}
			}
		case <-poll.C:
			return true
		case <-rep.C():
			rep.report(nil)
		case <-passC:
			ok, next := pl.passHeads(time.Now())
			if ok {
				return true
			}
			pass.Reset(next)
		case <-probeC:
			if !head {
				// A waiter ahead that died leaves its ticket:
				// follow the next one ahead (the front of the
				// queue prunes dead tickets).
				if !ticketAlive(ahead) {
					pl.freeSince = time.Time{}
					if ahead = follow(pl, wk); ahead == "" {
						return true
					}
				}
				if ok, _ := pl.passHeads(time.Now()); ok {
					return true
				}
				continue
			}
			for _, st := range seen {
				if holderGone(st) {
					return true
				}
			}
		}
	}
}

// watchHolders has wk watch the liveness files of the holders in seen for
// their last close (the kernel drops a liveness lock exactly then). watched
// is false when some holder cannot be watched so (no watch, a holder
// without a liveness file, one whose liveness lock is already free but is
// kept alive by its job's process group: the probe looks at those).
func watchHolders(wk *waker, seen []*Status) (watched bool) {
	var paths []string
	for _, st := range seen {
		switch {
		case st == nil || st.State != StateHeld:
		case st.orphan != "":
			paths = append(paths, st.orphan)
		case st.Info == nil || !sameHost(st.Info.Host):
			// Judged by its record and mtime alone: no probe
			// tells more (turnsStale and the poll look again).
		case validToken(st.Info.Token):
			paths = append(paths, livePath(st.Path, st.Info.Token))
		default:
			return false
		}
	}
	if !wk.watchHolders(paths) {
		return false
	}
	// Watched from now on: a liveness lock dropped before (or none: the
	// Node tool's) is for the probe.
	for _, p := range paths {
		if held, _, _ := probeLiveFile(p); !held {
			return false
		}
	}
	return true
}

// passHeads is the check of a waiter behind the head: it notes whether a
// lock it waits for is free, and reports whether the waiters ahead have
// left it free long enough (headGrace for each) to be passed, setting
// pl.pass for the next try; else next is when to look again.
func (pl *place) passHeads(now time.Time) (pass bool, next time.Duration) {
	free := false
	for _, p := range pl.q.paths {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			free = true
			break
		}
	}
	if !free {
		pl.freeSince = time.Time{}
		return false, passEvery(pl.pos)
	}
	if pl.freeSince.IsZero() {
		// Free since the folder last changed at the latest (the
		// removal changed it), never earlier.
		pl.freeSince = now
		if fi, err := os.Stat(filepath.Dir(pl.q.anchor)); err == nil && fi.ModTime().Before(now) {
			pl.freeSince = fi.ModTime()
		}
	}
	// A head that leaves the lock free on purpose (Options.Admit refused
	// it: not enough free video memory) tends its ticket: it is passed
	// only a grace after its last touch, that is, once it stopped.
	if tended := pl.tendedAhead(); tended.After(pl.freeSince) && !tended.After(now) {
		pl.freeSince = tended
	}
	k := max(pl.pos-1, 1)
	if at := pl.freeSince.Add(time.Duration(k) * headGrace); now.Before(at) {
		return false, min(at.Sub(now), passEvery(pl.pos))
	}
	pl.pass = k
	// Should the try not take it (the head took it meanwhile, or a
	// device set needs more), look again only a grace later.
	pl.freeSince = now
	return true, 0
}

// follow finds the live rival ticket nearest ahead of pl's and has wk
// watch it, returning its path, or "" when no live rival is ahead.
func follow(pl *place, wk *waker) string {
	seq := pl.seq()
	for range maxAttempts {
		tickets, err := listTickets(pl.q.anchor)
		if err != nil {
			return ""
		}
		var ahead string
		for i := len(tickets) - 1; i >= 0; i-- {
			if t := tickets[i]; t.seq < seq && pl.q.rival(t) && ticketAlive(t.path) {
				ahead = t.path
				break
			}
		}
		if ahead == "" {
			return ""
		}
		if wk.follow(ahead) {
			return ahead
		}
		// Gone between the listing and the watch: list again.
	}
	return ""
}

// staleMargin is added to the time a lock turns stale before looking again,
// so that the look finds it stale.
const staleMargin = 10 * time.Millisecond

// turnsStale is the earliest time at which one of the held locks seen turns
// stale by its mtime alone.
func turnsStale(o Options, seen []*Status) (time.Time, bool) {
	var at time.Time
	for _, st := range seen {
		if st == nil || st.State != StateHeld || st.orphan != "" {
			continue
		}
		t := st.ModTime.Add(o.Stale)
		if st.Info == nil {
			t = st.ModTime.Add(writeGrace)
		}
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at, !at.IsZero()
}

// look re-reads and judges the locks seen, without the guard, reporting
// whether any is free or stale (or cannot be read: trying will tell why).
func look(o Options, seen []*Status) ([]*Status, bool) {
	fresh := make([]*Status, len(seen))
	for i, st := range seen {
		if st == nil {
			return seen, true
		}
		now, err := readStatus(st.Path)
		if err != nil || now.State == StateFree {
			return seen, true
		}
		judgeLock(now, o.Stale, false)
		if now.State != StateHeld {
			return seen, true // stale: trying clears it
		}
		fresh[i] = now
	}
	return fresh, false
}

// keptGone is holderGone for a lock that only the processes of a gone
// holder's job keep held (st.keptBy): a signal test of each group every
// probe, and a look at their processes, which reads all of /proc, once a
// keptCheck (a signal reaches zombies too, which keep no card).
func keptGone(st *Status) bool {
	full := time.Since(st.keptChecked) >= keptCheck
	if full {
		st.keptChecked = time.Now()
	}
	for _, g := range st.keptBy {
		if proc.GroupSignalable(g) && (!full || proc.GroupAlive(g)) {
			return false
		}
	}
	return true
}

// keptCheck is how often the liveness probe looks at every process of the
// groups that alone keep a gone holder's lock held (see holderGone).
const keptCheck = time.Second

// holderGone is the liveness probe: whether the holder seen in st has
// visibly ended (its liveness lock is free, or its pid is gone).
func holderGone(st *Status) bool {
	if st != nil && len(st.keptBy) > 0 {
		return keptGone(st)
	}
	if st != nil && st.orphan != "" {
		// Gone, or free: the job whose record was removed ended (a try
		// under the guard tells which).
		held, _, _ := probeLiveFile(st.orphan)
		return !held
	}
	if st == nil || st.State != StateHeld || st.Info == nil || !sameHost(st.Info.Host) {
		return false
	}
	if held, known, _ := probeLive(st.Path, st.Info.Token); known {
		return !held
	}
	return !proc.Alive(st.Info.PID)
}

// holders names who is in the way in seen, for messages (see
// WaitError.Holders).
func holders(seen []*Status) string {
	plain, devices := splitSeen(seen)
	if plainHeld(plain) {
		if len(devices) > 0 {
			return plain.Holder() + ", a job on every GPU"
		}
		return plain.Holder()
	}
	parts := make([]string, 0, len(devices))
	for _, st := range devices {
		who := "free"
		if st.State != StateFree {
			who = st.Holder()
		} else if plain != nil {
			continue // a plain lock's devices: only those held
		}
		parts = append(parts, "GPU "+st.Device+": "+who)
	}
	if len(parts) == 0 {
		return "another job"
	}
	return strings.Join(parts, ", ")
}

// errGuardStuck says the guard has been held for longer than any step
// under it takes.
func errGuardStuck(path string) error {
	return fmt.Errorf("lock: another process has held %s for over %s; is a gpuexec stopped (SIGSTOP) mid-step?", path+guardSuffix, clearGuardWait)
}

// maxAttempts bounds how often one attempt re-tries after clearing a stale
// lock or finding the lock released under it.
const maxAttempts = 4

// attempt makes one try for t's locks under the anchor's guard (o.Path),
// from the place pl (see place; one that is queued gets a ticket now if it
// has none, or anew if its ticket was pruned because its waiter stopped for
// longer than Options.Stale). Every lock file is settled under its own
// guard, which is kept until the try ends (for a single lock that is the
// anchor's), so that the free ones stay free among gpuexec processes until
// they are created; a stale lock is cleared whatever the caller's place.
// With t.need of them free it takes them, at the head of the queue or
// passing heads that left them free (pl.pass), all at once or none. It
// returns the held lock, or nil and the locks as seen.
func attempt(ctx context.Context, o Options, t target, pl *place) (*Held, []*Status, error) {
	if pl.tk == nil {
		// With devices the anchor is no lock, but a user's --lock:
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
	before, err := queuePlace(g, o, pl)
	if err != nil {
		return nil, nil, err
	}
	var seen []*Status
	for range maxAttempts {
		var guards []*guard
		if seen, guards, err = settleAll(ctx, o, t); err != nil {
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
			if blockers, inner, err = settleBeside(ctx, o); err != nil {
				releaseGuards(guards)
				return nil, nil, err
			}
			guards = append(guards, inner...)
		} else if t.names != nil {
			if cover, err = settle(o, o.Path); err != nil {
				releaseGuards(guards)
				return nil, nil, err
			}
			if coverBlocks(cover) {
				blockers = []*Status{cover}
			}
		}
		pl.onPurpose = before <= pl.pass && len(blockers) > 0
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
		if (o.Admit != nil || o.ShareMiB > 0) && before <= pl.pass {
			free = pl.admit(o, free, seen)
		}
		if before > pl.pass || len(free) < t.need {
			pl.onPurpose = before <= pl.pass && len(free) > 0
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
		if before > 0 {
			what, it := "the free GPU lock", "it"
			if t.names != nil {
				what, it = "free GPUs", "them"
			}
			o.Logger.Warn(fmt.Sprintf("took %s ahead of %d waiter(s) that left %s untaken for %s (stopped?); they keep their places", what, before, it, headGrace), "path", o.Path)
		}
		// A holder of one lock keeps its ticket until its job has
		// started (see Held.retire): the lock it holds is all that the
		// ticket waits for. A device set's ticket would hold up the
		// waiters for its other devices, and a sharer's those who may
		// join it: theirs goes now.
		if t.names != nil || o.ShareMiB > 0 {
			pl.leave()
		}
		return h, nil, nil
	}
	return nil, seen, nil
}

// settleAll settles each of t's lock files under its own guard (the
// anchor's, held by the caller, for a single lock), returning them as seen
// and the guards taken, which the caller releases. The guards are taken in
// one order for everyone (by path, ignoring case, as a case-insensitive
// filesystem does), so that two processes naming the same devices in
// another order, or through another queue, never hold one each and wait
// for the other.
func settleAll(ctx context.Context, o Options, t target) ([]*Status, []*guard, error) {
	seen := make([]*Status, len(t.paths))
	var guards []*guard
	for _, i := range t.guardOrder() {
		p := t.paths[i]
		if p != o.Path {
			gd, err := takeInnerGuard(ctx, p)
			if err != nil {
				releaseGuards(guards)
				return nil, nil, err
			}
			guards = append(guards, gd)
		}
		st, err := settle(o, p)
		if err != nil {
			releaseGuards(guards)
			return nil, nil, err
		}
		if t.names != nil {
			st.Device = t.names[i]
		}
		seen[i] = st
	}
	return seen, guards, nil
}

func releaseGuards(guards []*guard) {
	for _, g := range guards {
		g.release()
	}
}

// create takes the locks t.paths[idx...], all or none: for each, the
// liveness lock, then the record; for a device set, the cover of the lock
// at o.Path first (cover: that lock as settled, free or a cover to join).
// Call with every guard held and the locks settled free.
func create(o Options, t target, idx []int, seen []*Status, cover *Status) (*Held, error) {
	h := &Held{o: o, lost: lost.New()}
	if t.names != nil {
		var err error
		if h.cover, err = takeCover(o, cover, h.lost); err != nil {
			return nil, err
		}
	}
	for _, i := range idx {
		var l *fileLock
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
	return h, nil
}

// createOne takes the liveness lock of the lock file at path, then creates
// its record.
func createOne(o Options, path string, ls *lost.Signal) (*fileLock, error) {
	info := newInfo(o)
	if o.ShareMiB > 0 {
		live, sh, err := createShared(o, path, info)
		if err != nil {
			return nil, err
		}
		o.Path = path
		return newFileLock(o, info, live, sh, ls, false), nil
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
	return newFileLock(o, info, live, nil, ls, false), nil
}

// joinOne joins, as a sharer, the shared lock seen as st (settled under
// the guards held).
func joinOne(o Options, st *Status, ls *lost.Signal) (*fileLock, error) {
	live, sh, err := joinShared(o, st)
	if err != nil {
		return nil, err
	}
	info := *st.Info
	o.Path = st.Path
	return newFileLock(o, &info, live, sh, ls, false), nil
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
// that, settle refuses such a file just the same.
func refuseNonLock(path string) error {
	_, err := readStatus(path)
	return err
}

// queuePlace makes sure a queued caller has a ticket and returns how many
// live rival waiters are ahead of it, setting pl.pos (0 when not queued).
// Call with the guard held.
func queuePlace(g *guard, o Options, pl *place) (before int, err error) {
	if pl.queued {
		if pl.tk != nil && !pl.tk.exists() {
			o.Logger.Warn("this waiter's queue ticket was pruned; queueing again at the back", "path", o.Path)
			pl.tk.drop()
			pl.tk = nil
		}
		if pl.tk == nil {
			if pl.tk, err = takeTicket(g, o, pl.q); err != nil {
				return 0, err
			}
		}
	}
	if before, err = ahead(pl.q, pl.seq(), o.Stale); err != nil {
		return 0, err
	}
	pl.pos = 0
	if pl.queued {
		pl.pos = before + 1
	}
	return before, nil
}

// leave drops the caller's ticket once it holds the lock.
func (pl *place) leave() {
	pl.tk.drop()
	pl.tk = nil
}

// settle reads the lock at path and clears it if it is stale (logging
// why), returning it free or held. A lock that keeps changing under it is
// returned as last judged. A lock whose record is gone counts as held while
// a liveness file beside it is still locked: the job of a holder whose
// record was removed (clear --force) still runs. Call with the guard held.
func settle(o Options, path string) (*Status, error) {
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

var (
	selfStartOnce sync.Once
	selfStart     int64
)

func findSelfStart() { selfStart, _ = proc.Start(os.Getpid()) }

func newInfo(o Options) *Info {
	selfStartOnce.Do(findSelfStart)
	now := time.Now().UTC()
	info := &Info{
		PID:        os.Getpid(),
		AcquiredAt: now.Format(isoMillis),
		Owner:      o.Owner,
		Slug:       o.Slug,
		Token:      newToken(),
		Host:       proc.HostName(),
		PIDStart:   selfStart,
	}
	if o.HoldLimit > 0 {
		info.Deadline = now.Add(o.HoldLimit).Format(isoMillis)
	}
	return info
}

// inspectAll reads and judges t's locks without the guard, each named by
// its device: for Inspect, and for a wait that ended before a try saw
// them. One that cannot be read is left out and its error returned.
func inspectAll(o Options, t target) ([]*Status, error) {
	var seen []*Status
	var errs []error
	for i, p := range t.paths {
		st, err := inspectOne(p, o.Stale)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if t.names != nil {
			st.Device = t.names[i]
		}
		seen = append(seen, st)
	}
	return seen, errors.Join(errs...)
}

// judgeLock judges the lock read as st (see judge) on this host, a shared
// record's sharers listed first (with prune, under the guard, dead ones'
// sidecars removed): they keep it held while their jobs run.
func judgeLock(st *Status, stale time.Duration, prune bool) {
	if st.Info != nil && st.Info.Share {
		st.Sharers = listSharers(st.Path, stale, prune)
	}
	judge(st, time.Now(), stale, osProber{lockPath: st.Path})
	if st.State != StateHeld {
		st.Sharers = nil
	}
}

// inspectSeen is inspectAll with, after t's locks, those beside them that
// keep them from being taken (see cover.go), as attempt's seen has them.
func inspectSeen(o Options, t target) ([]*Status, error) {
	seen, err := inspectAll(o, t)
	if err != nil {
		return seen, err
	}
	if t.names == nil {
		return append(seen, inspectBeside(o)...), nil
	}
	if st, err := inspectOne(o.Path, o.Stale); err == nil && coverBlocks(st) {
		seen = append(seen, st)
	}
	return seen, nil
}

// inspectOne reads and judges the lock file at path, changing nothing.
func inspectOne(path string, stale time.Duration) (*Status, error) {
	st, err := readStatus(path)
	if err != nil {
		return nil, err
	}
	if st.State != StateFree {
		judgeLock(st, stale, false)
	} else if busy := findOrphan(path, stale); busy != nil {
		st = busy
	}
	return st, nil
}

// clearGuardWait bounds how long Clear, a heartbeat and RecordChild wait
// for the guard, which is normally held for a few system calls at a time: a
// process stopped (SIGSTOP) while holding it must not hang them.
const clearGuardWait = 10 * time.Second

// clearOne is Clear of the lock file at o.Path.
func clearOne(o Options, force bool) (*Status, error) {
	// A free lock, and a path that is no lock, are told without the
	// guard: nothing is created beside them, a read-only folder answers.
	st, err := readStatus(o.Path)
	if err != nil {
		return nil, err
	}
	if st.State == StateFree {
		var busy *Status
		if force {
			var cleared []*Status
			busy, cleared = clearLeftovers(o.Path, o.Stale)
			for _, c := range cleared {
				o.Logger.Warn("cleared a file that kept the free GPU lock held", "path", o.Path, "file", filepath.Base(c.orphan), "reason", c.Reason)
			}
		} else {
			busy = findOrphan(o.Path, o.Stale)
		}
		if busy != nil {
			return busy, fmt.Errorf("%w: %s; nothing to clear: the lock is free once that job ends", ErrHeld, busy.Holder())
		}
		return st, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), clearGuardWait)
	defer cancel()
	g, err := takeGuard(ctx, o.Path)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, errGuardStuck(o.Path)
	}
	if err != nil {
		return nil, explain(o.Path, err)
	}
	defer g.release()
	if st, err = readStatus(o.Path); err != nil || st.State == StateFree {
		return st, err
	}
	judgeLock(st, o.Stale, false)
	if st.State == StateHeld && !force {
		return st, fmt.Errorf("%w: %s", ErrHeld, st.Holder())
	}
	if err := removeIfSame(o.Path, st); err != nil {
		return st, explainClear(o.Path, st, err)
	}
	return st, nil
}

// admitEvery is how often a caller whose free locks Options.Admit refused
// asks again.
const admitEvery = time.Second

// tendEvery is how often such a caller touches its ticket while it asks
// and between asks: well within headGrace, so that the waiters behind see
// a head that waits on purpose, not one that stopped (see passHeads).
const tendEvery = 500 * time.Millisecond

// attemptAdmitted is attempt with Options.Admit: a try that found free
// locks it could take but for Admit asks Admit about them, outside every
// guard, and tries again with those admitted. pl.why keeps what Admit said
// while it refuses.
func attemptAdmitted(ctx context.Context, o Options, t target, pl *place) (*Held, []*Status, error) {
	try := func() (*Held, []*Status, error) {
		ctx := ctx
		if pl.tryWait > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, pl.tryWait)
			defer cancel()
		}
		return attempt(ctx, o, t, pl)
	}
	pl.refused, pl.admitted, pl.admittedWith = nil, nil, nil
	h, seen, err := try()
	if err != nil || h != nil || len(pl.refused) == 0 {
		if err == nil {
			pl.why = ""
		}
		return h, seen, err
	}
	names := make([]string, len(pl.refused))
	for k, i := range pl.refused {
		if t.names != nil {
			names[k] = t.names[i]
		}
	}
	stop := pl.tend()
	var ok []bool
	var why string
	pl.admittedWith = make([]int64, len(t.paths))
	if o.ShareMiB > 0 {
		cands := make([]Candidate, len(pl.refused))
		for k, i := range pl.refused {
			cands[k] = Candidate{Device: names[k], Sharers: seen[i].Sharers}
			pl.admittedWith[i], _ = Budget(seen[i].Sharers)
		}
		ok, why = o.AdmitShare(ctx, cands)
	} else {
		ok, why = o.Admit(ctx, names)
	}
	stop()
	if ctx.Err() != nil {
		if pl.why == "" {
			pl.why = why // what held it up was Admit, not a holder
		}
		return nil, seen, ctx.Err()
	}
	pl.admitted = make([]bool, len(t.paths))
	n := 0
	for k, i := range pl.refused {
		if k < len(ok) && ok[k] {
			pl.admitted[i] = true
			n++
		}
	}
	if n < len(pl.refused) && why == "" {
		why = "a free GPU to be admitted"
	}
	pl.why = why
	if n < t.need {
		return nil, seen, nil
	}
	pl.refused = nil
	h, again, err := try()
	pl.admitted, pl.admittedWith = nil, nil
	if again != nil {
		seen = again
	}
	if err == nil && (h != nil || len(pl.refused) == 0) {
		pl.why = ""
	}
	return h, seen, err
}

// admit keeps of the free locks (and, for a sharer, the shared ones) those
// Admit let through for this try, noting the others in pl.refused. A shared
// lock whose sharers' budgets grew since Admit was asked is asked about
// again.
func (pl *place) admit(o Options, free []int, seen []*Status) []int {
	if o.ShareMiB > 0 && o.AdmitShare == nil {
		return free
	}
	var ok []int
	pl.refused = pl.refused[:0]
	for _, i := range free {
		used, known := Budget(seen[i].Sharers)
		grew := !known || (i < len(pl.admittedWith) && used > pl.admittedWith[i])
		if i < len(pl.admitted) && pl.admitted[i] && !grew {
			ok = append(ok, i)
		} else {
			pl.refused = append(pl.refused, i)
		}
	}
	return ok
}

// tend touches pl's ticket every tendEvery until the returned stop is
// called (a no-op without a ticket).
func (pl *place) tend() (stop func()) {
	tk := pl.tk
	if tk == nil {
		return func() {}
	}
	osfile.Touch(tk.f, time.Now())
	end, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(tendEvery)
		defer t.Stop()
		for {
			select {
			case <-end:
				return
			case now := <-t.C:
				osfile.Touch(tk.f, now)
			}
		}
	}()
	return func() {
		close(end)
		<-done
	}
}

// awaitAdmission is waitForChange for a caller whose free locks Admit
// refused: it asks again after admitEvery (or at the poll), tending its
// ticket meanwhile, and logs the waiting line when rep says it is due. It
// returns false when ctx ends.
func (pl *place) awaitAdmission(ctx context.Context, poll *time.Timer, rep *reporter) bool {
	stop := pl.tend()
	defer stop()
	t := time.NewTimer(admitEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-rep.C():
			rep.report(nil)
			continue
		case <-t.C:
		case <-poll.C:
		}
		return true
	}
}

// tendedAhead is the latest time a live rival waiter ahead of pl touched
// its ticket (zero when none is known).
func (pl *place) tendedAhead() time.Time {
	var latest time.Time
	tickets, err := listTickets(pl.q.anchor)
	if err != nil {
		return latest
	}
	seq := pl.seq()
	for _, t := range tickets {
		if t.seq >= seq || !pl.q.rival(t) {
			continue
		}
		if fi, err := os.Lstat(t.path); err == nil && fi.ModTime().After(latest) && ticketAlive(t.path) {
			latest = fi.ModTime()
		}
	}
	return latest
}
