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
		for k, i := range ws.refused {
			cands[k] = Candidate{Device: names[k], Sharers: seen[i].Sharers, Ahead: ws.ahead}
			ws.admittedWith[i], _ = Budget(seen[i].Sharers)
		}
		ok, why = o.AdmitShare(ctx, cands)
	} else {
		ok, why = o.Admit(ctx, names)
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
		if ws.ahead != nil && (!ws.stillPasses() || (i < len(ws.admittedWith) && used != ws.admittedWith[i])) {
			// The head changed, a sharer left (the head may fit
			// sooner), or the answer is too old: ask again.
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
// refused: it asks again after admitEvery (or at the poll), or at once when
// wk sees a lock released or a sharer leave (its memory may be what was in
// the way), tending its ticket meanwhile, and logs the waiting line when
// rep says it is due. It returns false when ctx ends.
func (ws *waitState) awaitAdmission(ctx context.Context, poll *time.Timer, rep *reporter, wk *waker) bool {
	if wk.watchReleases() {
		return true // the folder was not watched: a leave went unseen
	}
	stop := ws.tend()
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
		case <-wk.C():
		}
		return true
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
