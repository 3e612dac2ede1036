package lock

import (
	"context"
	"os"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
)

// admitEvery is how often a caller whose free locks Options.Admit refused
// asks again.
const admitEvery = time.Second

// tendEvery is how often such a caller touches its ticket while it asks
// and between asks: well within headGrace, so that the waiters behind see
// a head that waits on purpose, not one that stopped (see passHeads).
const tendEvery = 500 * time.Millisecond

// attemptAdmitted is attempt with Options.Admit: a try that found free
// locks it could take but for Admit asks Admit about them, outside every
// guard, and tries again with those admitted. ws.why keeps what Admit said
// while it refuses.
func attemptAdmitted(ctx context.Context, o Options, t lockSet, ws *waitState) (*Held, []*Status, error) {
	try := func() (*Held, []*Status, error) {
		ctx := ctx
		if ws.tryWait > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, ws.tryWait)
			defer cancel()
		}
		return attempt(ctx, o, t, ws)
	}
	ws.refused, ws.admitted, ws.admittedWith, ws.admittedAhead = nil, nil, nil, nil
	h, seen, err := try()
	if err != nil || h != nil || len(ws.refused) == 0 {
		if err == nil {
			ws.why = ""
		}
		return h, seen, err
	}
	names := make([]string, len(ws.refused))
	for k, i := range ws.refused {
		if t.names != nil {
			names[k] = t.names[i]
		}
	}
	stop := ws.tend()
	var ok []bool
	var why string
	ws.admittedWith = make([]int64, len(t.paths))
	if o.ShareMiB > 0 {
		cands := make([]Candidate, len(ws.refused))
		ws.admittedSet = make([]string, len(t.paths))
		for k, i := range ws.refused {
			cands[k] = Candidate{Device: names[k], Sharers: seen[i].Sharers, Ahead: ws.ahead}
			ws.admittedWith[i], _ = Budget(seen[i].Sharers)
			ws.admittedSet[i] = sharerSet(seen[i].Sharers)
		}
		asked := time.Now()
		ok, why = o.AdmitShare(ctx, cands)
		ws.askTook = time.Since(asked)
		ws.noteAsk(asked)
	} else {
		ok, why = o.Admit(ctx, names)
		ws.noteAsk(time.Now())
	}
	stop()
	if ctx.Err() != nil {
		if ws.why == "" {
			ws.why = why // what held it up was Admit, not a holder
		}
		return nil, seen, ctx.Err()
	}
	ws.admitted = make([]bool, len(t.paths))
	n := 0
	for k, i := range ws.refused {
		if k < len(ok) && ok[k] {
			ws.admitted[i] = true
			n++
		}
	}
	if n < len(ws.refused) && why == "" {
		why = "a free GPU to be admitted"
	}
	if ws.ahead != nil {
		// Not its turn: what kept it from starting ahead is no
		// waiting line's.
		ws.admittedAhead, why = ws.ahead, ""
	}
	ws.why = why
	if n < t.need {
		return nil, seen, nil
	}
	ws.refused = nil
	h, again, err := try()
	ws.admitted, ws.admittedWith, ws.admittedAhead = nil, nil, nil
	if again != nil {
		seen = again
	}
	if err == nil && (h != nil || len(ws.refused) == 0) {
		ws.why = ""
	}
	return h, seen, err
}

// admit keeps of the free locks (and, for a sharer, the shared ones) those
// Admit let through for this try, noting the others in ws.refused. A shared
// lock whose sharers' budgets grew since Admit was asked is asked about
// again.
func (ws *waitState) admit(o Options, free []int, seen []*Status) []int {
	if o.ShareMiB > 0 && o.AdmitShare == nil {
		return free
	}
	var ok []int
	ws.refused = ws.refused[:0]
	for _, i := range free {
		used, known := Budget(seen[i].Sharers)
		grew := !known || (i < len(ws.admittedWith) && used > ws.admittedWith[i])
		if ws.ahead != nil && (!ws.stillPasses() || i >= len(ws.admittedSet) || sharerSet(seen[i].Sharers) != ws.admittedSet[i]) {
			// The head changed, a sharer came or went (the head
			// may start sooner), or the answer is too old: ask
			// again.
			grew = true
		}
		if i < len(ws.admitted) && ws.admitted[i] && !grew {
			ok = append(ok, i)
		} else {
			ws.refused = append(ws.refused, i)
		}
	}
	return ok
}

// tend touches ws's ticket every tendEvery until the returned stop is
// called (a no-op without a ticket).
func (ws *waitState) tend() (stop func()) {
	tk := ws.tk
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
// refused: it asks again after admitEvery (or at the poll), or sooner when
// wk sees a lock released or a sharer leave (its memory may be what was in
// the way), but never more than askBurst times within askWindow: a member
// of the folder's group can remove files by those names as fast as it
// likes, and each ask runs nvidia-smi. It tends the ticket meanwhile,
// and logs the waiting line when rep says it is due. It returns false
// when ctx ends.
func (ws *waitState) awaitAdmission(ctx context.Context, poll *time.Timer, rep *reporter, wk *waker) bool {
	// Watch the folder (a waiter that was behind the head followed a
	// ticket instead). A leave before this went unseen: the next ask,
	// a second on, sees its effect.
	wk.watchReleases()
	stop := ws.tend()
	defer stop()
	t := time.NewTimer(admitEvery)
	defer t.Stop()
	woken := wk.C()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-rep.C():
			rep.report(nil)
			continue
		case <-woken:
			if wait := ws.askWait(time.Now()); wait > 0 {
				t.Reset(min(wait, admitEvery))
				woken = nil // the timer asks then
				continue
			}
		case <-t.C:
		case <-poll.C:
		}
		return true
	}
}

// askBurst and askWindow bound how often a waiter that removals in the
// folder wake asks Admit or AdmitShare (see awaitAdmission): askBurst
// times in any askWindow. Two sharers leaving one after the other are two
// asks at once; a storm of removals is two asks a second.
const (
	askBurst  = 3
	askWindow = 1500 * time.Millisecond
)

// askWait is how long, from now, before the waiter may ask again when
// woken: zero while it asked fewer than askBurst times in the last
// askWindow.
func (ws *waitState) askWait(now time.Time) time.Duration {
	if len(ws.asks) < askBurst {
		return 0
	}
	return max(ws.asks[len(ws.asks)-askBurst].Add(askWindow).Sub(now), 0)
}

// noteAsk keeps the times of the last askBurst asks.
func (ws *waitState) noteAsk(at time.Time) {
	ws.asks = append(ws.asks, at)
	if len(ws.asks) > askBurst {
		ws.asks = ws.asks[len(ws.asks)-askBurst:]
	}
}

// tendedAhead is the latest time a live rival waiter ahead of ws touched
// its ticket (zero when none is known).
func (ws *waitState) tendedAhead() time.Time {
	var latest time.Time
	tickets, err := listTickets(ws.q.path)
	if err != nil {
		return latest
	}
	seq := ws.seq()
	for _, t := range tickets {
		if t.seq >= seq || !ws.q.rival(t) {
			continue
		}
		if fi, err := os.Lstat(t.path); err == nil && fi.ModTime().After(latest) && ticketAlive(t.path) {
			latest = fi.ModTime()
		}
	}
	return latest
}
