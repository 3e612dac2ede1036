// Package report sums up a GPU lock's journal (package journal) over a
// window of time: per owner, the jobs by outcome, GPU-hours held, waits
// and peak video memory against the budget; the jobs that did not run or
// did not finish (the missing videos); per card, how long it sat idle
// while someone waited for it, and idle overall; the jobs that held a card
// without using it; and what the reader set aside. Summarize computes a
// Summary; WriteText, WriteJSON and WriteHTML show it.
//
// Every string of a Summary is as the journal held it, another user's
// word: the writers escape it (package escape for text and JSON,
// html/template for HTML). What a Summary keeps is bounded (MaxOwners,
// MaxRows, MaxListed, MaxBars) whatever the journal holds; what a bound
// left out is counted and said.
package report

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpuexec/gpuexec/internal/journal"
)

// Bounds of a Summary.
const (
	// MaxOwners is the most owners listed (those with the most jobs
	// first); the others are counted in Summary.OwnersLeftOut.
	MaxOwners = 200
	// MaxRows is the most timeline rows (lock and device pairs) kept;
	// jobs on the others are counted in Summary.JobsOffRows.
	MaxRows = 64
	// MaxListed is the most jobs listed in Summary.NotRun and
	// Summary.Unused each (the latest first); the others are counted.
	MaxListed = 500
	// MaxBars is the most bars, and the most waits, kept on all the rows
	// of a timeline together: each of n rows keeps its latest MaxBars/n;
	// the others are counted in Row.BarsLeftOut.
	MaxBars = 40000
)

// DefaultUnused is Options.Unused when it is 0.
const DefaultUnused = 20 * time.Minute

// DefaultSince is how far back a report looks by default.
const DefaultSince = 7 * 24 * time.Hour

// Options select what Summarize sums up.
type Options struct {
	// Since and Until bound the window: the jobs that ended in [Since,
	// Until) are counted, and their times are cut to it. A zero Until is
	// Now; a zero Since is DefaultSince before Until.
	Since, Until time.Time
	// Owners keeps the jobs of these owners alone (exact names); none
	// keeps all.
	Owners []string
	// Unused lists the jobs that held the lock with no video memory in
	// use for at least this long (Record.UnusedMS); 0 is DefaultUnused.
	Unused time.Duration
	// Now is the time of the report; zero is time.Now().
	Now time.Time
}

// Summary is what Summarize found. Durations are in milliseconds in JSON
// (the _ms fields), times in RFC 3339, UTC.
type Summary struct {
	// Since and Until are the window, Now the time of the report.
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	Now   time.Time `json:"now"`
	// Owners filtered on (none: all).
	OwnerFilter []string `json:"owner_filter,omitempty"`
	// UnusedMS is the threshold of Unused.
	UnusedMS int64 `json:"unused_threshold_ms"`
	// Jobs is the number of jobs counted; ByOutcome splits them.
	Jobs      int            `json:"jobs"`
	ByOutcome []OutcomeCount `json:"by_outcome"`
	// HeldMS is the GPU time held by all jobs (see Owner.GPUHeldMS).
	GPUHeldMS int64 `json:"gpu_held_ms"`
	// Owners are the owners, most GPU time first.
	Owners        []Owner `json:"owners"`
	OwnersLeftOut int     `json:"owners_left_out,omitempty"`
	// NotRun are the jobs that did not run to their end: every outcome
	// but ok (deferred, timeout, failed, interrupted, lost, overbudget,
	// refused), the latest first.
	NotRun        []Job `json:"not_ok"`
	NotRunLeftOut int   `json:"not_ok_left_out,omitempty"`
	// Unused are the jobs that held the lock unused for at least
	// UnusedMS, the latest first.
	Unused        []Job `json:"held_unused"`
	UnusedLeftOut int   `json:"held_unused_left_out,omitempty"`
	// Rows are the timeline's rows, one per lock and device (or lock
	// alone, for the jobs without devices), sorted.
	Rows        []Row `json:"cards"`
	JobsOffRows int   `json:"jobs_off_cards,omitempty"`
	// Reader is what the journal reader read and set aside.
	Reader Reader `json:"reader"`
	// Outside says that jobs not run under gpuexec do not journal.
	Outside string `json:"outside"`
}

// OutcomeCount is a number of jobs that ended with Outcome.
type OutcomeCount struct {
	Outcome journal.Outcome `json:"outcome"`
	Jobs    int             `json:"jobs"`
}

// Owner is one owner's jobs.
type Owner struct {
	Name      string         `json:"owner"`
	Jobs      int            `json:"jobs"`
	ByOutcome []OutcomeCount `json:"by_outcome"`
	// GPUHeldMS is the time held within the window, times the number of
	// devices held (a job without devices counts as one):
	// GPU-milliseconds.
	GPUHeldMS int64 `json:"gpu_held_ms"`
	// WaitP50MS, WaitP90MS and WaitMaxMS are the waits of all its jobs
	// (nearest rank).
	WaitP50MS int64 `json:"wait_p50_ms"`
	WaitP90MS int64 `json:"wait_p90_ms"`
	WaitMaxMS int64 `json:"wait_max_ms"`
	// PeakMiB is the most video memory one of its jobs used (nil: none
	// measured); BudgetMiB the largest --vram of its jobs (0: none);
	// OverBudget the jobs whose peak passed their own --vram.
	PeakMiB    *int64 `json:"peak_vram_mib,omitempty"`
	BudgetMiB  int64  `json:"vram_budget_mib,omitempty"`
	OverBudget int    `json:"over_budget,omitempty"`
}

// Job is one job as listed.
type Job struct {
	Owner   string          `json:"owner"`
	Slug    string          `json:"slug"`
	Host    string          `json:"host"`
	Lock    string          `json:"lock"`
	Devices []string        `json:"devices,omitempty"`
	Outcome journal.Outcome `json:"outcome"`
	Status  int             `json:"status"`
	Signal  string          `json:"signal,omitempty"`
	Queued  time.Time       `json:"queued"`
	Started *time.Time      `json:"started,omitempty"`
	Ended   time.Time       `json:"ended"`
	// WaitedMS, HeldMS and UnusedMS are the record's.
	WaitedMS int64  `json:"waited_ms"`
	HeldMS   int64  `json:"held_ms"`
	UnusedMS *int64 `json:"unused_ms,omitempty"`
}

// Row is one timeline row: a lock and one of its devices, or a lock alone.
type Row struct {
	Lock   string `json:"lock"`
	Device string `json:"device,omitempty"`
	// BusyMS is how long in the window the row was held by a job of
	// gpuexec (the union of the held times); IdleMS the rest of the
	// window; IdleWhileWaitingMS the time some job waited for it while
	// it was not held (the union of the waits less the union of the
	// held times): ~0 when the queue works.
	BusyMS             int64 `json:"busy_ms"`
	IdleMS             int64 `json:"idle_ms"`
	IdleWhileWaitingMS int64 `json:"idle_while_waiting_ms"`
	// Jobs is the number of jobs of the row.
	Jobs int `json:"jobs"`
	// Bars are the jobs that held it, Waits the waits, by start.
	Bars        []Bar `json:"bars"`
	Waits       []Bar `json:"waits"`
	BarsLeftOut int   `json:"bars_left_out,omitempty"`
}

// Bar is one interval of a row, cut to the window: a job's time held, or
// its wait.
type Bar struct {
	From    time.Time       `json:"from"`
	To      time.Time       `json:"to"`
	Owner   string          `json:"owner"`
	Slug    string          `json:"slug"`
	Outcome journal.Outcome `json:"outcome"`
}

// Reader is what the journal reader reported.
type Reader struct {
	Files     []string       `json:"files"`
	Missing   []string       `json:"missing,omitempty"`
	SetAside  map[string]int `json:"set_aside,omitempty"`
	Truncated bool           `json:"truncated,omitempty"`
}

// OutsideNote is Summary.Outside.
const OutsideNote = "jobs run outside gpuexec (the seed's Node tool, a command started by hand) write no journal: their time on a card shows here as idle"

// Summarize sums up the records of rd (nil: none) as opts select.
func Summarize(rd *journal.Read, opts Options) *Summary {
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	now = now.UTC()
	until := opts.Until
	if until.IsZero() {
		until = now
	}
	since := opts.Since
	if since.IsZero() {
		since = until.Add(-DefaultSince)
	}
	since, until = since.UTC(), until.UTC()
	if until.Before(since) {
		until = since
	}
	unused := opts.Unused
	if unused <= 0 {
		unused = DefaultUnused
	}
	s := &Summary{Since: since, Until: until, Now: now, OwnerFilter: opts.Owners,
		UnusedMS: unused.Milliseconds(), Outside: OutsideNote, Owners: []Owner{}, NotRun: []Job{}, Unused: []Job{}, Rows: []Row{}}
	if rd == nil {
		rd = &journal.Read{}
	}
	s.Reader = Reader{Files: rd.Files, Missing: rd.Missing, Truncated: rd.Truncated}
	if rd.Lines() > 0 {
		s.Reader.SetAside = rd.SetAside
	}
	if s.Reader.Files == nil {
		s.Reader.Files = []string{}
	}
	w := journal.Window{From: since, Until: until}
	want := map[string]bool{}
	for _, o := range opts.Owners {
		want[o] = true
	}

	var (
		owners   = map[string]*ownerAcc{}
		rows     = map[rowKey]*rowAcc{}
		total    = map[journal.Outcome]int{}
		notRun   []*journal.Record
		unusedJ  []*journal.Record
		wholeLck = map[string][]span{} // held times of the jobs without devices, by lock
		lockHeld = map[string][]span{} // held times of every job, by lock
	)
	// The rows first, to know how many bars each keeps (perRow): a row
	// keeps no more than twice that many while the jobs are added, so
	// that a journal of many jobs on many devices takes no more memory
	// than its bars, its spans and its records.
	keys := map[rowKey]bool{}
	for i := range rd.Records {
		r := &rd.Records[i]
		if !w.Holds(r.Ended) || (len(want) > 0 && !want[r.Owner]) {
			continue
		}
		for _, d := range devicesOrLock(r) {
			if k := (rowKey{r.Lock, d}); !keys[k] && len(keys) < MaxRows {
				keys[k] = true
			}
		}
	}
	perRow := MaxBars / max(1, len(keys))
	at := func(d time.Duration) time.Time { return since.Add(d) }
	for i := range rd.Records {
		r := &rd.Records[i]
		if !w.Holds(r.Ended) || (len(want) > 0 && !want[r.Owner]) {
			continue
		}
		s.Jobs++
		total[r.Outcome]++
		o := owners[r.Owner]
		if o == nil {
			o = &ownerAcc{name: r.Owner, by: map[journal.Outcome]int{}}
			owners[r.Owner] = o
		}
		if r.Outcome != journal.OK {
			notRun = append(notRun, r)
		}
		if r.UnusedMS != nil && *r.UnusedMS >= unused.Milliseconds() {
			unusedJ = append(unusedJ, r)
		}
		held, heldOK := cut(r.Started, r.Ended, since, until)
		var heldMS int64
		if heldOK {
			heldMS = (held.to - held.from).Milliseconds()
		}
		o.add(r, heldMS)
		waitEnd := r.Ended
		if r.Started != nil {
			waitEnd = *r.Started
		}
		wait, waitOK := cut(&r.Queued, waitEnd, since, until)
		if heldOK {
			lockHeld[r.Lock] = append(lockHeld[r.Lock], held)
			if len(r.Devices) == 0 {
				wholeLck[r.Lock] = append(wholeLck[r.Lock], held)
			}
		}
		for _, d := range devicesOrLock(r) {
			k := rowKey{r.Lock, d}
			ra := rows[k]
			if ra == nil {
				if len(rows) >= MaxRows {
					s.JobsOffRows++
					continue
				}
				ra = &rowAcc{}
				rows[k] = ra
			}
			ra.jobs++
			if heldOK {
				ra.held = compact(append(ra.held, held), &ra.heldLast)
				ra.bars = append(ra.bars, bar(held, r, at))
				if len(ra.bars) >= 2*perRow {
					ra.bars = latest(ra.bars, perRow, &ra.left)
				}
			}
			if waitOK && wait.to > wait.from {
				ra.waits = compact(append(ra.waits, wait), &ra.waitsLast)
				ra.waitBars = append(ra.waitBars, bar(wait, r, at))
				if len(ra.waitBars) >= 2*perRow {
					ra.waitBars = latest(ra.waitBars, perRow, &ra.left)
				}
			}
		}
	}

	for _, o := range journal.Outcomes {
		s.ByOutcome = append(s.ByOutcome, OutcomeCount{o, total[o]})
	}
	for _, o := range owners {
		s.Owners = append(s.Owners, o.owner())
		s.GPUHeldMS += o.gpuMS
	}
	slices.SortFunc(s.Owners, func(a, b Owner) int {
		return cmp.Or(cmp.Compare(b.GPUHeldMS, a.GPUHeldMS), cmp.Compare(b.Jobs, a.Jobs), cmp.Compare(a.Name, b.Name))
	})
	if len(s.Owners) > MaxOwners {
		s.OwnersLeftOut = len(s.Owners) - MaxOwners
		s.Owners = s.Owners[:MaxOwners]
	}
	s.NotRun, s.NotRunLeftOut = listed(notRun)
	s.Unused, s.UnusedLeftOut = listed(unusedJ)

	window := until.Sub(since).Milliseconds()
	for k, ra := range rows {
		busy := ra.held
		if k.device != "" {
			// A job without devices held every device of its lock.
			busy = append(slices.Clip(busy), wholeLck[k.lock]...)
		} else {
			// A job without devices waits for the lock as a whole: it
			// is not idle while any job of the lock holds a device.
			busy = append(slices.Clip(busy), lockHeld[k.lock]...)
		}
		busyU := union(busy)
		row := Row{Lock: k.lock, Device: k.device, Jobs: ra.jobs,
			BusyMS:             length(busyU),
			IdleWhileWaitingMS: length(minus(union(ra.waits), busyU)),
			Bars:               ra.bars, Waits: ra.waitBars}
		row.IdleMS = max(0, window-row.BusyMS)
		row.Bars = latest(row.Bars, perRow, &row.BarsLeftOut)
		row.Waits = latest(row.Waits, perRow, &row.BarsLeftOut)
		row.BarsLeftOut += ra.left
		if row.Bars == nil {
			row.Bars = []Bar{}
		}
		if row.Waits == nil {
			row.Waits = []Bar{}
		}
		s.Rows = append(s.Rows, row)
	}
	slices.SortFunc(s.Rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Lock, b.Lock), compareDevices(a.Device, b.Device))
	})
	return s
}

// compareDevices orders device names by number where both are numbers
// ("2" before "10"), the lock alone ("") first.
func compareDevices(a, b string) int {
	if len(a) != len(b) && isDigits(a) && isDigits(b) {
		return cmp.Compare(len(a), len(b))
	}
	return cmp.Compare(a, b)
}

func isDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

type rowKey struct{ lock, device string }

type rowAcc struct {
	jobs           int
	held, waits    []span
	bars, waitBars []Bar
	// heldLast and waitsLast are the lengths of held and waits at their
	// last compact; left counts the bars and waits left out.
	heldLast, waitsLast int
	left                int
}

// devicesOrLock are the rows' devices of r: its devices, or "" (the lock
// as a whole) for a job without.
func devicesOrLock(r *journal.Record) []string {
	if len(r.Devices) == 0 {
		return []string{""}
	}
	return r.Devices
}

func bar(sp span, r *journal.Record, at func(time.Duration) time.Time) Bar {
	return Bar{From: at(sp.from), To: at(sp.to), Owner: r.Owner, Slug: r.Slug, Outcome: r.Outcome}
}

// latest is the n latest bars of b (by From, sorted), in b's own memory,
// and adds how many it left out to left.
func latest(b []Bar, n int, left *int) []Bar {
	sortBars(b)
	if k := len(b) - n; k > 0 {
		*left += k
		copy(b, b[k:])
		clear(b[n:])
		return b[:n]
	}
	return b
}

func sortBars(b []Bar) {
	slices.SortStableFunc(b, func(x, y Bar) int { return x.From.Compare(y.From) })
}

// listed is the jobs of rs, the latest first, at most MaxListed, and how
// many were left out.
func listed(rs []*journal.Record) ([]Job, int) {
	slices.SortStableFunc(rs, func(a, b *journal.Record) int { return b.Ended.Compare(a.Ended) })
	left := 0
	if len(rs) > MaxListed {
		left = len(rs) - MaxListed
		rs = rs[:MaxListed]
	}
	out := make([]Job, 0, len(rs))
	for _, r := range rs {
		out = append(out, Job{Owner: r.Owner, Slug: r.Slug, Host: r.Host, Lock: r.Lock, Devices: r.Devices,
			Outcome: r.Outcome, Status: r.Status, Signal: r.Signal, Queued: r.Queued, Started: r.Started, Ended: r.Ended,
			WaitedMS: r.WaitedMS, HeldMS: r.HeldMS, UnusedMS: r.UnusedMS})
	}
	return out, left
}

type ownerAcc struct {
	name       string
	jobs       int
	by         map[journal.Outcome]int
	gpuMS      int64
	waits      []int64
	peak       *int64
	budget     int64
	overBudget int
}

// add counts r, which held the lock heldMS within the window.
func (o *ownerAcc) add(r *journal.Record, heldMS int64) {
	o.jobs++
	o.by[r.Outcome]++
	o.gpuMS += heldMS * int64(max(1, len(r.Devices)))
	o.waits = append(o.waits, r.WaitedMS)
	if r.PeakMiB != nil {
		if o.peak == nil || *r.PeakMiB > *o.peak {
			p := *r.PeakMiB
			o.peak = &p
		}
		if r.VRAMMiB > 0 && *r.PeakMiB > r.VRAMMiB {
			o.overBudget++
		}
	}
	o.budget = max(o.budget, r.VRAMMiB)
}

func (o *ownerAcc) owner() Owner {
	out := Owner{Name: o.name, Jobs: o.jobs, GPUHeldMS: o.gpuMS, PeakMiB: o.peak, BudgetMiB: o.budget, OverBudget: o.overBudget}
	for _, oc := range journal.Outcomes {
		out.ByOutcome = append(out.ByOutcome, OutcomeCount{oc, o.by[oc]})
	}
	slices.Sort(o.waits)
	out.WaitP50MS = Percentile(o.waits, 50)
	out.WaitP90MS = Percentile(o.waits, 90)
	if len(o.waits) > 0 {
		out.WaitMaxMS = o.waits[len(o.waits)-1]
	}
	return out
}

// Percentile is the p-th percentile (0 < p ≤ 100) of sorted, by nearest
// rank: the smallest value that at least p% of the values are at or below;
// 0 for none.
func Percentile(sorted []int64, p int) int64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := (p*n + 99) / 100 // ceil(p/100 * n)
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}
