package lock

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpuexec/gpuexec/internal/escape"
)

// Backfill: a sharer behind the head of the queue may join a shared lock
// ahead of it when its own job is stopped, at the latest, before the head
// could start anyway (Options.Backfill). The lock knows who waits ahead and
// what each holder's deadline and budget are; the caller's AdmitShare knows
// the device's memory, and decides with Ahead.HeadStart.

// releaseMargin is added to a backfilling sharer's own deadline: the time
// its gpuexec takes, once its job was killed, to see it gone and leave.
const releaseMargin = 100 * time.Millisecond

// Ahead is what a sharer that would start ahead of the queue must not
// delay: the head of the queue for its lock, and how many live waiters it
// would pass. Candidate.Ahead carries it; nil for a sharer at its turn.
type Ahead struct {
	// Owner and Slug are the head's, as its ticket says (another user's
	// words: shown escaped).
	Owner, Slug string
	// Whole says the head takes the device alone: it starts once every
	// sharer on it is gone.
	Whole bool
	// MiB is the head's budget when it is a sharer, and Reserve the
	// memory its own admission keeps free beside the budgets (MiB; 0 for
	// its default): the room it will see is not the caller's.
	MiB, Reserve int64
	// Waiters is how many live waiters would be passed, the head
	// included.
	Waiters int
	// Ends is when the caller's job would be stopped at the latest, were
	// it to start now (its HoldLimit from now, a margin for its release,
	// and one for the time until it joins: see waitState.joinSlack).
	Ends time.Time
	// asked is when Ends was worked out, and slack what it allows
	// for the time until the join.
	asked time.Time
	slack time.Duration
}

// HeadStart is the earliest time the head could start by the holders'
// word, given room MiB of the device free to share now (beside the
// sharers' budgets): the time by which, every sharer on the device ending
// at its deadline, enough of their budgets are free for the head — for a
// head that takes the device alone, the last sharer's deadline. ok is false
// when that time cannot be bounded: a sharer it waits for has no deadline
// (no --timeout), its gpuexec is gone (nothing stops its job), its budget
// cannot be read, or the head needs more than the sharers will ever free
// (memory held outside gpuexec). A head that fits now starts now.
func (a *Ahead) HeadStart(now time.Time, room int64, sharers []Sharer) (at time.Time, ok bool) {
	type end struct {
		at  time.Time
		mib int64
	}
	ends := make([]end, 0, len(sharers))
	for _, s := range sharers {
		d := s.DeadlineTime()
		if s.MiB < 0 || s.Gone || s.Unopened {
			d = time.Time{}
		}
		ends = append(ends, end{d, s.MiB})
	}
	// Those without a deadline end last, never.
	slices.SortStableFunc(ends, func(x, y end) int {
		switch {
		case x.at.IsZero() && y.at.IsZero():
			return 0
		case x.at.IsZero():
			return 1
		case y.at.IsZero():
			return -1
		}
		return x.at.Compare(y.at)
	})
	if a.Whole {
		if len(ends) == 0 {
			return now, true
		}
		last := ends[len(ends)-1].at
		return last, !last.IsZero()
	}
	if room >= a.MiB {
		return now, true
	}
	free := room
	for _, e := range ends {
		if e.at.IsZero() {
			return time.Time{}, false
		}
		free += e.mib
		if free >= a.MiB {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// Passes reports whether a sharer whose job ends by a.Ends may start now
// without delaying the head: whether it ends by HeadStart's time, room
// being what is free to share now, before the caller's own budget is
// taken from it.
func (a *Ahead) Passes(now time.Time, room int64, sharers []Sharer) bool {
	at, ok := a.HeadStart(now, room, sharers)
	return ok && !a.Ends.After(at)
}

// DeadlineTime parses the sharer's Deadline; the zero time when it has
// none (or one no sidecar may hold: see validTime).
func (s Sharer) DeadlineTime() time.Time {
	if !validTime(s.Deadline) {
		return time.Time{}
	}
	return parseStamp(s.Deadline)
}

// backfillAhead is the Ahead of a waiter for one shared lock, under the
// guard: the first live rival ticket before seq is the head, and every live
// rival before seq must wait for that lock alone (a device set's waiter, or
// one whose ticket cannot be read or names no need, is one whose start
// cannot be worked out: no backfill past it). ok is false when no waiter
// is ahead, or one cannot be passed. The number of tickets read is bounded
// by maxBackfillPass.
func backfillAhead(q *queue, seq uint64, o Options, slack time.Duration) (*Ahead, bool) {
	if seq == 0 || len(q.names) != 1 {
		return nil, false
	}
	tickets, err := listTickets(q.path)
	if err != nil {
		return nil, false
	}
	var a *Ahead
	for _, t := range tickets {
		if t.seq >= seq {
			break
		}
		if !q.rival(t) || !ticketAlive(t.path) {
			continue
		}
		rec, err := readTicket(t.path)
		if err != nil || len(rec.Locks) != 1 || rec.Locks[0] != q.names[0] || rec.Share == rec.Whole ||
			(rec.Share && rec.VRAMMiB <= 0) || rec.VRAMMiB > math.MaxInt32 || rec.ReserveMiB < 0 || rec.ReserveMiB > math.MaxInt32 {
			return nil, false
		}
		if a == nil {
			a = &Ahead{Owner: rec.Owner, Slug: rec.Slug, Whole: rec.Whole, MiB: rec.VRAMMiB, Reserve: rec.ReserveMiB}
		}
		if a.Waiters++; a.Waiters > maxBackfillPass {
			return nil, false
		}
	}
	if a == nil {
		return nil, false
	}
	a.asked, a.slack = time.Now(), slack
	a.Ends = a.asked.Add(o.HoldLimit + releaseMargin + slack)
	return a, true
}

// maxBackfillPass bounds how many waiters a sharer may pass by backfill,
// and so the tickets it reads under the guard at each try.
const maxBackfillPass = 8

// minJoinSlack and maxJoinSlack bound how long after AdmitShare was asked
// the join may come (see waitState.joinSlack): the Ends it is asked about
// is that much later than the caller's deadline would be at the asking,
// and a join later than that asks again.
const (
	minJoinSlack = 300 * time.Millisecond
	maxJoinSlack = 10 * time.Second
)

// who names the head for the log: owner/slug, escaped.
func (a *Ahead) who() string {
	return escape.Text(a.Owner) + "/" + escape.Text(a.Slug)
}

// same reports whether a and b name the same head with the same need.
func (a *Ahead) same(b *Ahead) bool {
	return a != nil && b != nil && a.Owner == b.Owner && a.Slug == b.Slug && a.Whole == b.Whole && a.MiB == b.MiB &&
		a.Reserve == b.Reserve
}

// mayBackfill reports whether this try of a waiter behind the head may
// join the one lock of t, shared now, ahead of the queue (Options.Backfill),
// setting ws.ahead for AdmitShare. Before the device's memory is asked
// about, the holders' deadlines must leave time for this sharer's job even
// were the head to need no more than this sharer's budget beside theirs.
func (ws *waitState) mayBackfill(o Options, t lockSet, seen []*Status) bool {
	ws.ahead = nil
	ws.canBackfill = o.Backfill && o.ShareMiB > 0 && o.HoldLimit > 0 && o.AdmitShare != nil && ws.queued &&
		len(t.paths) == 1 && t.need == 1 && joinable(seen[0])
	if !ws.canBackfill {
		return false
	}
	a, ok := backfillAhead(ws.q, ws.seq(), o, ws.joinSlack())
	if !ok {
		return false
	}
	// The room is at least this sharer's budget (it must fit): the head
	// starts by then at the latest. A start that cannot be bounded so
	// may still be, with the room there is: AdmitShare tells.
	if at, bounded := a.HeadStart(time.Now(), o.ShareMiB, seen[0].Sharers); bounded && a.Ends.After(at) {
		return false
	}
	ws.ahead = a
	return true
}

// joinSlack is the time this waiter allows between asking AdmitShare
// whether it may start ahead and starting: twice what its last ask took,
// at least minJoinSlack, at most maxJoinSlack.
func (ws *waitState) joinSlack() time.Duration {
	return min(max(minJoinSlack, 2*ws.askTook), maxJoinSlack)
}

// stillPasses reports whether what AdmitShare let this waiter pass still
// holds for this try: the same head, asked about within the slack its
// Ends allowed for.
func (ws *waitState) stillPasses() bool {
	a, b := ws.ahead, ws.admittedAhead
	return a.same(b) && time.Since(b.asked) <= b.slack
}

// sharerSet names the sharers read as they are, to tell whether any came
// or went since: another set with the same budgets in all may let the head
// start at another time.
func sharerSet(sharers []Sharer) string {
	var b strings.Builder
	for _, s := range sharers {
		fmt.Fprintf(&b, "%d/%d/%s/%d/%s/%t/%t;", s.PID, s.PIDStart, s.Since, s.MiB, s.Deadline, s.Gone, s.Unopened)
	}
	return b.String()
}
