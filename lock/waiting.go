package lock

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// The waiting line: what a waiter logs at once and every Options.Report,
// on a timer of its own (whatever wakes the waiter for a try), so that
// whoever reads it knows when the job may run: who holds the lock, for how
// long already and until when at most, this waiter's place in the queue,
// how long it has waited and when it gives up.

// Waiting is where a waiter stands, for its waiting line (see
// Status.WaitingLine).
type Waiting struct {
	// Position is the waiter's place in the queue, 1 for the next one
	// served; 0 leaves the queue out of the line.
	Position int
	// Of is how many wait in all, the waiter included (taken to be
	// Position when less).
	Of int
	// Waited is how long it has waited so far.
	Waited time.Duration
	// Until is when it gives up waiting (gpuexec --wait: its context's
	// deadline); zero when it waits as long as it takes.
	Until time.Time
}

// WaitingLine is the line a waiter at w logs while s holds the lock:
// "waiting for GPU lock: held by channels/ep12 (pid 4242) for 12m,
// deadline 21:40 (in 28m); position 2 of 3; waited 5m, defers in 2h25m".
// The line says it all: it is logged without fields that would repeat it
// (a reader of JSON logs who wants the holder and the queue as data has
// status --json). What other users wrote (owner, slug, host) is in it as
// Info.Holder makes it printable. Every backend logs this line.
func (s *Status) WaitingLine(w Waiting) string {
	return waitingLine([]*Status{s}, w, time.Now())
}

// waitingLine is the waiting line for the locks seen (one, or each
// device's) at now.
func waitingLine(seen []*Status, w Waiting, now time.Time) string {
	var b strings.Builder
	plain, beside := splitSeen(seen)
	switch {
	case plainHeld(plain):
		st := plain
		b.WriteString("waiting for GPU lock: held by " + holderSpan(st, now))
		if len(beside) > 0 {
			// Devices kept from being taken by a job on every GPU.
			b.WriteString(", a job on every GPU")
		}
	case plain != nil && heldIn(beside):
		// A plain lock kept from being taken by devices beside it.
		b.WriteString("waiting for GPU lock: its GPUs are held: ")
		first := true
		for _, st := range beside {
			if st.State == StateFree {
				continue
			}
			if !first {
				b.WriteString("; ")
			}
			first = false
			b.WriteString("GPU " + st.Device + " by " + holderSpan(st, now))
		}
	case len(beside) > 1 || (len(beside) == 1 && plain == nil):
		b.WriteString("waiting for GPU locks: ")
		first := true
		for _, st := range beside {
			if !first {
				b.WriteString("; ")
			}
			first = false
			name := filepath.Base(st.Path)
			if st.Device != "" {
				name = "GPU " + st.Device
			}
			if st.State == StateFree {
				b.WriteString(name + ": free")
			} else {
				b.WriteString(name + ": held by " + holderSpan(st, now))
			}
		}
	default:
		b.WriteString("waiting for GPU lock: free, but earlier arrivals go first")
	}
	return b.String() + waitTail(w, now)
}

// plainHeld reports whether st, the plain lock as seen, is held for itself:
// not free, and not a cover of the devices beside it (which are held
// themselves, and named).
func plainHeld(st *Status) bool {
	return st != nil && st.State != StateFree && (st.Info == nil || !st.Info.Cover)
}

// splitSeen parts the locks a waiter saw (see WaitError.Seen) into the lock
// of no device (the plain lock: the one waited for, or the one that keeps
// the devices waited for from being taken; nil when none was seen) and the
// devices' locks, in order.
func splitSeen(seen []*Status) (plain *Status, devices []*Status) {
	for _, st := range seen {
		switch {
		case st == nil:
		case st.Device == "" && plain == nil:
			plain = st
		case st.Device != "":
			devices = append(devices, st)
		}
	}
	return plain, devices
}

func heldIn(locks []*Status) bool {
	for _, st := range locks {
		if st.State != StateFree {
			return true
		}
	}
	return false
}

// admitLine is the waiting line of a waiter at the head whose free locks
// Options.Admit refused for why: "waiting for 10.0 GiB on GPU 0: 3.1 GiB
// free; pid 4711 python (17.2 GiB) not under gpuexec; position 1 of 2;
// waited 5m, defers in 2h25m".
func admitLine(why string, w Waiting, now time.Time) string {
	return "waiting for " + why + waitTail(w, now)
}

// waitTail is what every waiting line ends with: the position, the wait
// so far and the time left ("; position 2 of 3; waited 5m, defers in
// 2h25m").
func waitTail(w Waiting, now time.Time) string {
	var b strings.Builder
	if w.Position > 0 {
		fmt.Fprintf(&b, "; position %d of %d", w.Position, max(w.Of, w.Position))
	}
	b.WriteString("; waited " + fmtSpan(w.Waited))
	if !w.Until.IsZero() {
		b.WriteString(", defers in " + fmtSpan(w.Until.Sub(now)))
	}
	return b.String()
}

// holderSpan is who holds st, for how long already and until when at most:
// "channels/ep12 (pid 4242) for 12m, deadline 21:40 (in 28m)", with the
// reason when the lock is odd.
func holderSpan(st *Status, now time.Time) string {
	s := st.Holder()
	if st.Info != nil {
		if t := st.Info.Acquired(); !t.IsZero() {
			s += " for " + fmtSpan(now.Sub(t))
		}
		if t := st.Info.DeadlineTime(); !t.IsZero() {
			s += ", deadline " + fmtClock(t, now)
			if d := t.Sub(now); d >= 0 {
				s += " (in " + fmtSpan(d) + ")"
			} else {
				s += " (" + fmtSpan(-d) + " ago)"
			}
		}
	}
	if st.Reason != "" {
		s += " (" + st.Reason + ")"
	}
	return s
}

// fmtSpan is a duration as a person reads it in a waiting line: seconds
// under a minute ("42s"), else whole minutes ("12m", "2h25m", "3h"). A
// negative one is 0s.
func fmtSpan(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Minute-time.Second/2 {
		return fmt.Sprintf("%ds", int(d.Round(time.Second)/time.Second))
	}
	m := int(d.Round(time.Minute) / time.Minute)
	switch h := m / 60; {
	case h == 0:
		return fmt.Sprintf("%dm", m)
	case m%60 == 0:
		return fmt.Sprintf("%dh", h)
	default:
		return fmt.Sprintf("%dh%dm", h, m%60)
	}
}

// fmtClock is a time of day in local time, "21:40", with the date when it
// is not on now's day: "Oct 13 02:10".
func fmtClock(t, now time.Time) string {
	t, now = t.Local(), now.Local()
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04")
	}
	return t.Format("Jan 2 15:04")
}

// reporter logs a queued waiter's line at its first try that does not get
// the lock, then every Options.Report on a timer of its own, which
// waitForChange waits on too.
type reporter struct {
	o     Options
	t     lockSet
	ws    *waitState
	start time.Time
	until time.Time // ctx's deadline; zero when none
	timer *time.Timer
	seen  []*Status // the locks as last reported
	began bool
}

func newReporter(ctx context.Context, o Options, t lockSet, ws *waitState, start time.Time) *reporter {
	r := &reporter{o: o, t: t, ws: ws, start: start, timer: time.NewTimer(o.Report)}
	r.timer.Stop()
	r.until, _ = ctx.Deadline()
	return r
}

// C fires when the next line is due.
func (r *reporter) C() <-chan time.Time { return r.timer.C }

func (r *reporter) stop() { r.timer.Stop() }

// logFirst logs the logFirst line, with the locks as the try that did not get
// them saw them, unless it is logged already.
func (r *reporter) logFirst(seen []*Status) {
	if !r.began {
		r.began = true
		r.report(seen)
	}
}

// report logs the line with the locks seen, or, for nil, as they are now
// (read without the guard: a waiter behind the head is not woken by
// handoffs ahead of it, and what it saw at its last try may be long past),
// and sets the timer for the next.
func (r *reporter) report(seen []*Status) {
	defer r.timer.Reset(r.o.Report)
	// (Logger.IsInfo cannot tell whether the line is wanted: an
	// intercept logger's sinks may want what its own level drops.)
	if seen == nil {
		if fresh, err := inspectSeen(r.o, r.t); err == nil && len(fresh) >= len(r.t.paths) {
			seen = fresh
		} else {
			seen = r.seen
		}
	}
	r.seen = seen
	now := time.Now()
	pos, of := standing(r.ws.q, r.ws.seq())
	if pos == 0 {
		pos, of = r.ws.pos, r.ws.pos
	}
	w := Waiting{Position: pos, Of: of, Waited: now.Sub(r.start), Until: r.until}
	line := waitingLine(seen, w, now)
	if r.ws.why != "" {
		line = admitLine(r.ws.why, w, now)
	}
	r.o.Logger.Info(line, "path", r.o.Path)
}

// standing is the place of the waiter with ticket seq among the live
// waiters that compete with it, and how many they are, as the queue's
// files say now (read without the guard, for the waiting line); 0, 0 when
// its ticket is not there.
func standing(q *queue, seq uint64) (pos, of int) {
	tickets, err := listTickets(q.path)
	if err != nil || seq == 0 {
		return 0, 0
	}
	for _, t := range tickets {
		switch {
		case t.seq == seq:
			of++
			pos = of
		case q.rival(t) && ticketAlive(t.path):
			of++
		}
	}
	return pos, of
}
