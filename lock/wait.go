package lock

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gpuexec/gpuexec/internal/proc"
)

// The acquisition core: one path for a single lock and for a device set (a
// single lock is the device set whose one lock file is the queue's path
// itself). A try (attempt) runs under the queue's guard: it takes or keeps
// a ticket (queuePlace), judges every lock file (clearing stale ones), and
// takes
// the locks only at the head of the queue. Between tries a waiter sleeps in
// waitForChange until something it waits for may have changed.

// waitState is a waiter's waitState in the queue between its tries: the queue as
// it sees it, its ticket (nil until it has one), its position at the last
// try, and what it knows of a head that does not take a free lock.
type waitState struct {
	q      *queue
	queued bool // it takes a ticket (Acquire); TryAcquire does not
	tk     *ticket
	pos    int // 1 for the head; 0 when not queued
	// mayPass is how many live waiters ahead this try may mayPass: those
	// that left the lock free for longer than headGrace each (see
	// waitForChange).
	mayPass int
	// freeSince is when this waiter, behind the head, first found a
	// lock it waits for free and not taken; zero when it did not.
	freeSince time.Time
	// With Options.Admit: refused are the free locks (indexes into the
	// lock set's paths) the last try could have taken but for Admit, which
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
	// ahead, for a sharer behind the head that may backfill
	// (Options.Backfill), is what its last try would pass; nil when that
	// try found nothing to backfill into. admittedAhead is what
	// AdmitShare let it pass, for the next try only.
	ahead         *Ahead
	admittedAhead *Ahead
	// admittedSet names, per lock, the sharers AdmitShare was told of
	// (see sharerSet); askTook is how long its last answer took, and
	// asks when the last few asks began (see askWait).
	admittedSet []string
	askTook     time.Duration
	asks        []time.Time
	// canBackfill says the last try found this waiter, behind the head,
	// one that may start ahead of it (Options.Backfill) on a lock that is
	// shared: it then tries again each admitEvery.
	canBackfill bool
	// onPurpose says the last try, at the head of the queue, left locks
	// that others wait for free on purpose: it waits for a lock beside
	// them (a plain lock for a device held, devices for a plain holder)
	// or for more of them (Need). It then tends its ticket, as a head
	// that Admit holds up does, so that those behind do not pass it.
	onPurpose bool
}

func (ws *waitState) seq() uint64 {
	if ws.tk == nil {
		return 0
	}
	return ws.tk.seq
}

// queueFor is Acquire's waiting loop: one try without a ticket (the common
// case, a free lock and nobody queued, needs no ticket and no watch), then
// a ticket and tries whenever something may have changed, until a try gets
// the lock, ctx ends, or an error. The release of any of t's lock files
// wakes it.
func queueFor(ctx context.Context, o Options, t lockSet) (*Held, error) {
	start := time.Now()
	if err := makeFolder(filepath.Dir(o.Path)); err != nil {
		return nil, err
	}
	ws := &waitState{q: newQueue(o.Path, t.paths)}
	// Admit is asked only from a place in the queue (a ticket): it takes
	// a while, and whoever comes meanwhile must queue behind this waiter,
	// not take the free lock from under it. The first try without a
	// ticket then takes nothing that Admit would be asked about.
	first := attemptAdmitted
	if o.Admit != nil || (o.ShareMiB > 0 && o.AdmitShare != nil) {
		first = attempt
	}
	h, seen, err := first(ctx, o, t, ws)
	switch {
	case err != nil && ctx.Err() != nil:
		seen, _ = inspectSeen(o, t)
		return nil, &WaitError{Seen: seen, Waited: time.Since(start), Why: ws.why, Err: ctx.Err()}
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
	// beside the job's start, not before it (see Held.leaveQueueLater).
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

	ws.queued = true
	defer func() { ws.tk.drop() }()
	rep := newReporter(ctx, o, t, ws, start)
	defer rep.stop()
	poll := time.NewTimer(o.Poll)
	defer poll.Stop()
	for {
		last := seen
		h, seen, err = attemptAdmitted(ctx, o, t, ws)
		ws.mayPass = 0
		if seen == nil {
			seen = last // a try cut short by ctx saw nothing new
		}
		if err != nil {
			if ctx.Err() != nil {
				if seen == nil {
					seen, _ = inspectSeen(o, t)
				}
				return nil, &WaitError{Seen: seen, Waited: time.Since(start), Why: ws.why, Err: ctx.Err()}
			}
			return nil, err
		}
		if h != nil {
			h.leaveQueueLater(ws.tk, wk)
			ws.tk, keep = nil, true
			h.logAcquired(time.Since(start))
			return h, nil
		}
		rep.logFirst(seen)
		poll.Reset(o.Poll)
		if !waitForChange(ctx, o, seen, ws, wk, poll, rep) || ctx.Err() != nil {
			return nil, &WaitError{Seen: seen, Waited: time.Since(start), Why: ws.why, Err: ctx.Err()}
		}
		ws.tk.touch(o.Heartbeat)
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
// ws: for the head of the queue, a release seen in the folder or a holder
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
func waitForChange(ctx context.Context, o Options, seen []*Status, ws *waitState, wk *waker, poll *time.Timer, rep *reporter) bool {
	// A lock turns stale at a known time (a record never written, a
	// heartbeat that stopped): look again then, not a poll later.
	var staleC <-chan time.Time
	if at, ok := turnsStale(o, seen); ok {
		t := time.NewTimer(time.Until(at) + staleMargin)
		defer t.Stop()
		staleC = t.C
	}
	seq := ws.seq()
	head := ws.pos <= 1 || seq == 0
	if ws.why != "" {
		// Free locks that Admit refused: ask again a moment later,
		// tending the ticket so that those behind do not pass.
		return ws.awaitAdmission(ctx, poll, rep, wk)
	}
	probing := !wk.closes()
	var ahead string // the ticket this waiter follows, behind the head
	if head && ws.onPurpose && ws.queued {
		defer ws.tend()()
	}
	if head {
		ws.freeSince = time.Time{}
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
	} else if ahead = follow(ws, wk); ahead == "" {
		return true
	}
	var probeC, passC, backfillC <-chan time.Time
	var pass *time.Timer
	if !head && ws.canBackfill {
		// A sharer that may start ahead of the head looks again each
		// admitEvery while the lock is shared (nothing in the folder
		// tells a waiter behind the head that a sharer left).
		t := time.NewTimer(admitEvery)
		defer t.Stop()
		backfillC = t.C
	}
	if probing {
		t := time.NewTicker(livenessProbe)
		defer t.Stop()
		probeC = t.C
	} else if !head {
		pass = time.NewTimer(passEvery(ws.pos))
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
			if ahead = follow(ws, wk); ahead == "" {
				return true // nobody live ahead: the head now
			}
			if ahead != was {
				// A waiter ahead left: one place nearer the
				// front at least (places only ever fall).
				ws.freeSince = time.Time{}
				ws.pos = max(ws.pos-1, 2)
				if pass != nil {
					pass.Reset(passEvery(ws.pos))
				}
			}
		case <-poll.C:
			return true
		case <-backfillC:
			return true
		case <-rep.C():
			rep.report(nil)
		case <-passC:
			ok, next := ws.passHeads(time.Now())
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
					ws.freeSince = time.Time{}
					if ahead = follow(ws, wk); ahead == "" {
						return true
					}
				}
				if ok, _ := ws.passHeads(time.Now()); ok {
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
		case st.Orphan != "":
			paths = append(paths, st.Orphan)
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
// ws.mayPass for the next try; else next is when to look again.
func (ws *waitState) passHeads(now time.Time) (pass bool, next time.Duration) {
	free := false
	for _, p := range ws.q.locks {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			free = true
			break
		}
	}
	if !free {
		ws.freeSince = time.Time{}
		return false, passEvery(ws.pos)
	}
	if ws.freeSince.IsZero() {
		// Free since the folder last changed at the latest (the
		// removal changed it), never earlier.
		ws.freeSince = now
		if fi, err := os.Stat(filepath.Dir(ws.q.path)); err == nil && fi.ModTime().Before(now) {
			ws.freeSince = fi.ModTime()
		}
	}
	// A head that leaves the lock free on purpose (Options.Admit refused
	// it: not enough free video memory) tends its ticket: it is passed
	// only a grace after its last touch, that is, once it stopped.
	if tended := ws.tendedAhead(); tended.After(ws.freeSince) && !tended.After(now) {
		ws.freeSince = tended
	}
	k := max(ws.pos-1, 1)
	if at := ws.freeSince.Add(time.Duration(k) * headGrace); now.Before(at) {
		return false, min(at.Sub(now), passEvery(ws.pos))
	}
	ws.mayPass = k
	// Should the try not take it (the head took it meanwhile, or a
	// device set needs more), look again only a grace later.
	ws.freeSince = now
	return true, 0
}

// follow finds the live rival ticket nearest ahead of ws's and has wk
// watch it, returning its path, or "" when no live rival is ahead.
func follow(ws *waitState, wk *waker) string {
	seq := ws.seq()
	for range maxAttempts {
		tickets, err := listTickets(ws.q.path)
		if err != nil {
			return ""
		}
		var ahead string
		for i := len(tickets) - 1; i >= 0; i-- {
			if t := tickets[i]; t.seq < seq && ws.q.rival(t) && ticketAlive(t.path) {
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
		if st == nil || st.State != StateHeld || st.Orphan != "" {
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
	if st != nil && st.Orphan != "" {
		// Gone, or free: the job whose record was removed ended (a try
		// under the guard tells which).
		held, _, _ := probeLiveFile(st.Orphan)
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
