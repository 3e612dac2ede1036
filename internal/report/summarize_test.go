package report_test

import (
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/report"
)

// rec is a valid record of owner on device dev ("" for the whole lock),
// times in minutes after day0; start < 0: it never started.
func rec(owner, dev string, queued, start, end int, oc journal.Outcome) journal.Record {
	at := func(m int) time.Time { return day0.Add(time.Duration(m) * time.Minute) }
	r := journal.Record{V: journal.Version, Owner: owner, Slug: "s", Host: "h", PID: nextPID(), Lock: "/l/gpu.lock",
		Queued: at(queued), Ended: at(end), Outcome: oc}
	if dev != "" {
		r.Devices = []string{dev}
	}
	if oc != journal.OK {
		r.Status = 1
	}
	if start >= 0 {
		st := at(start)
		r.Started = &st
		r.WaitedMS = int64(start-queued) * 60000
		r.HeldMS = int64(end-start) * 60000
	} else {
		r.WaitedMS = int64(end-queued) * 60000
	}
	if err := r.Validate(); err != nil {
		panic(err)
	}
	return r
}

var pid int

func nextPID() int { pid++; return pid }

func mins(m int) int64 { return int64(m) * 60000 }

func TestPercentile(t *testing.T) {
	for _, c := range []struct {
		in   []int64
		p    int
		want int64
	}{
		{nil, 50, 0},
		{[]int64{7}, 50, 7},
		{[]int64{7}, 90, 7},
		{[]int64{1, 2}, 50, 1},
		{[]int64{1, 2, 3, 4}, 50, 2},
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 91, 10},
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 100, 10},
		{[]int64{0, 0, 0, 100}, 50, 0},
	} {
		if got := report.Percentile(c.in, c.p); got != c.want {
			t.Errorf("Percentile(%v, %d) = %d, want %d", c.in, c.p, got, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	window := func(from, to int) report.Options {
		return report.Options{Since: day0.Add(time.Duration(from) * time.Minute), Until: day0.Add(time.Duration(to) * time.Minute), Now: day0.Add(48 * time.Hour)}
	}
	type row struct {
		name                         string // lock's device, "" for the lock alone
		jobs                         int
		busy, idle, idleWhileWaiting int64
	}
	cases := []struct {
		name   string
		recs   []journal.Record
		opts   report.Options
		jobs   int
		owners map[string][3]int64 // jobs, wait p50, wait p90 (minutes)
		rows   []row
		notOK  int
		gpu    int64 // GPU-milliseconds held in the window, when not 0
	}{{
		name: "waits that overlap, and the card idle between holders",
		recs: []journal.Record{
			rec("a", "0", 0, 0, 60, journal.OK),
			rec("b", "0", 30, 90, 100, journal.OK),      // waited 30-90: idle 60-90
			rec("c", "0", 50, 120, 130, journal.Failed), // waited 50-120: idle 100-120
		},
		opts:   window(0, 200),
		jobs:   3,
		owners: map[string][3]int64{"a": {1, 0, 0}, "b": {1, 60, 60}, "c": {1, 70, 70}},
		rows:   []row{{"0", 3, mins(80), mins(120), mins(50)}},
		notOK:  1,
	}, {
		name: "a queue that works: no idle while waiting",
		recs: []journal.Record{
			rec("a", "0", 0, 0, 60, journal.OK),
			rec("a", "0", 10, 60, 70, journal.OK),
			rec("a", "0", 20, 70, 80, journal.OK),
			rec("a", "", 30, -1, 75, journal.Deferred), // waited for any device
		},
		opts:   window(0, 100),
		jobs:   4,
		owners: map[string][3]int64{"a": {4, 45, 50}},
		rows:   []row{{"", 1, mins(80), mins(20), 0}, {"0", 3, mins(80), mins(20), 0}},
		notOK:  1,
	}, {
		name: "the window cuts holds and waits; a job that ended outside it is not counted",
		recs: []journal.Record{
			rec("a", "0", 0, 30, 90, journal.OK),   // held 30-90: 60-90 in the window
			rec("b", "0", 80, 90, 130, journal.OK), // ended after the window
			rec("c", "1", 100, 100, 110, journal.OK),
		},
		opts:   window(60, 120),
		jobs:   2,
		owners: map[string][3]int64{"a": {1, 30, 30}, "c": {1, 0, 0}},
		rows:   []row{{"0", 1, mins(30), mins(30), 0}, {"1", 1, mins(10), mins(50), 0}},
		gpu:    mins(40),
	}, {
		name: "owner filter",
		recs: []journal.Record{
			rec("a", "0", 0, 0, 10, journal.OK),
			rec("b", "0", 0, 10, 20, journal.Timeout),
			rec("c", "1", 0, 0, 10, journal.OK),
		},
		opts:   func() report.Options { o := window(0, 60); o.Owners = []string{"b", "c"}; return o }(),
		jobs:   2,
		owners: map[string][3]int64{"b": {1, 10, 10}, "c": {1, 0, 0}},
		// a's hold is filtered out: b's wait shows the card idle.
		rows:  []row{{"0", 1, mins(10), mins(50), mins(10)}, {"1", 1, mins(10), mins(50), 0}},
		notOK: 1,
	}, {
		name: "a job of the whole lock holds every device",
		recs: []journal.Record{
			rec("a", "", 0, 0, 30, journal.OK),
			rec("b", "0", 10, 30, 40, journal.OK),
			rec("c", "", 35, 40, 50, journal.OK), // waited 35-40 while b held device 0
		},
		opts:   window(0, 60),
		jobs:   3,
		owners: map[string][3]int64{"a": {1, 0, 0}, "b": {1, 20, 20}, "c": {1, 5, 5}},
		rows:   []row{{"", 2, mins(50), mins(10), 0}, {"0", 1, mins(50), mins(10), 0}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rd := &journal.Read{Records: c.recs}
			rd.Finish()
			s := report.Summarize(rd, c.opts)
			if s.Jobs != c.jobs {
				t.Errorf("Jobs = %d, want %d", s.Jobs, c.jobs)
			}
			if len(s.Owners) != len(c.owners) {
				t.Errorf("%d owners, want %d", len(s.Owners), len(c.owners))
			}
			for _, o := range s.Owners {
				w, ok := c.owners[o.Name]
				if !ok || int64(o.Jobs) != w[0] || o.WaitP50MS != mins(int(w[1])) || o.WaitP90MS != mins(int(w[2])) {
					t.Errorf("owner %s: jobs %d, wait p50 %d p90 %d; want %v (minutes)", o.Name, o.Jobs, o.WaitP50MS/60000, o.WaitP90MS/60000, w)
				}
			}
			if len(s.Rows) != len(c.rows) {
				t.Fatalf("rows %+v, want %+v", s.Rows, c.rows)
			}
			for i, want := range c.rows {
				r := s.Rows[i]
				got := row{r.Device, r.Jobs, r.BusyMS, r.IdleMS, r.IdleWhileWaitingMS}
				if got != want {
					t.Errorf("row %d = %+v, want %+v (ms)", i, got, want)
				}
			}
			if c.gpu != 0 && s.GPUHeldMS != c.gpu {
				t.Errorf("GPUHeldMS = %d, want %d", s.GPUHeldMS, c.gpu)
			}
			if len(s.NotRun) != c.notOK {
				t.Errorf("%d not ok, want %d", len(s.NotRun), c.notOK)
			}
		})
	}
}

// TestDayCounts pins the Day's figures (the scripted day's checks in
// miniature).
func TestDayCounts(t *testing.T) {
	s := report.Summarize(read(t, reporttestDay()), dayOpts())
	want := map[journal.Outcome]int{journal.OK: 6, journal.Failed: 1, journal.Timeout: 1, journal.Deferred: 1,
		journal.Interrupted: 2, journal.Lost: 1, journal.OverBudget: 1, journal.Refused: 1}
	for _, oc := range s.ByOutcome {
		if oc.Jobs != want[oc.Outcome] {
			t.Errorf("%s: %d jobs, want %d", oc.Outcome, oc.Jobs, want[oc.Outcome])
		}
	}
	if s.Jobs != 14 || len(s.NotRun) != 8 || len(s.Unused) != 1 || s.Unused[0].Slug != "notebook" {
		t.Errorf("jobs %d, not ok %d, unused %+v", s.Jobs, len(s.NotRun), s.Unused)
	}
	for _, r := range s.Rows {
		if r.IdleWhileWaitingMS != 0 {
			t.Errorf("%s %s: idle while waiting %dms, want 0", r.Lock, r.Device, r.IdleWhileWaitingMS)
		}
	}
	for _, o := range s.Owners {
		if o.Name == "alice" && (o.OverBudget != 1 || o.BudgetMiB != 8000 || *o.PeakMiB != 7900) {
			t.Errorf("alice: %+v", o)
		}
	}
}
