package lock

import (
	"context"
	"os"
	"time"

	"github.com/gpuexec/gpuexec/lock/internal/osfile"
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
