package cli

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/report"
)

// TestReportOfADay runs the scripted day through the real binary (runDay),
// then gpuexec report --json over it, and checks every count and duration
// the report gives against the day (theDay) and against the journal's
// times, summed here the plain way: on a millisecond grid.
func TestReportOfADay(t *testing.T) {
	t.Parallel()
	lockPath, journalPath := runDay(t)
	recs := readJournal(t, journalPath)
	if len(recs) != len(theDay) {
		t.Fatalf("%d lines in the journal, want %d", len(recs), len(theDay))
	}
	first, last := recs[0].Queued, recs[0].Ended
	for _, r := range recs {
		first, last = minTime(first, r.Queued), maxTime(last, r.Ended)
	}
	since, until := first.Add(-time.Second).Truncate(time.Second), last.Add(2*time.Second).Truncate(time.Second)
	res := gx(t, nil, "report", "--lock", lockPath, "--json",
		"--since", since.Format(time.RFC3339), "--until", until.Format(time.RFC3339))
	wantCode(t, res, 0)
	var s report.Summary
	if err := json.Unmarshal([]byte(res.stdout), &s); err != nil {
		t.Fatalf("report --json: %v\n%s", err, res.stdout)
	}

	// Counts, from the day as scripted.
	want := map[journal.Outcome]int{}
	var notOK []string
	for _, j := range theDay {
		want[j.Outcome]++
		if j.Outcome != journal.OK {
			notOK = append(notOK, j.Slug)
		}
	}
	wantOutcomes := func(what string, got []report.OutcomeCount) {
		t.Helper()
		if len(got) != len(journal.Outcomes) {
			t.Errorf("%s: %d outcomes, want all %d", what, len(got), len(journal.Outcomes))
		}
		for i, oc := range got {
			if i < len(journal.Outcomes) && oc.Outcome != journal.Outcomes[i] || oc.Jobs != want[oc.Outcome] {
				t.Errorf("%s: %d %s jobs (#%d), want %d", what, oc.Jobs, oc.Outcome, i, want[oc.Outcome])
			}
		}
	}
	if s.Jobs != len(theDay) {
		t.Errorf("%d jobs, want %d", s.Jobs, len(theDay))
	}
	wantOutcomes("the day", s.ByOutcome)
	if len(s.Owners) != 1 || s.Owners[0].Name != dayOwner {
		t.Fatalf("owners %+v, want %s alone (the SIGKILLed holder wrote no line)", s.Owners, dayOwner)
	}
	o := s.Owners[0]
	wantOutcomes(dayOwner, o.ByOutcome)
	if o.Jobs != len(theDay) || o.BudgetMiB != 4096 {
		t.Errorf("%s: %d jobs, budget %d MiB; want %d, 4096", dayOwner, o.Jobs, o.BudgetMiB, len(theDay))
	}
	var got []string
	for _, j := range s.NotRun {
		got = append(got, j.Slug)
		d := theDay[slices.IndexFunc(theDay, func(d dayJob) bool { return d.Slug == j.Slug })]
		if j.Outcome != d.Outcome || j.Status != d.Status || j.Signal != d.Signal || j.Owner != dayOwner || j.Lock != lockPath {
			t.Errorf("listed %+v, want %+v", j, d)
		}
	}
	slices.Sort(got)
	slices.Sort(notOK)
	if !slices.Equal(got, notOK) {
		t.Errorf("the jobs listed as not ok: %q, want %q", got, notOK)
	}

	// Durations, from the journal's times.
	var waits []int64
	var held, wait []span
	var heldMS int64
	for _, r := range recs {
		waits = append(waits, r.WaitedMS)
		waitEnd := r.Ended
		if r.Started != nil {
			waitEnd = *r.Started
			held = append(held, span{*r.Started, r.Ended})
			heldMS += r.Ended.Sub(*r.Started).Milliseconds()
		}
		wait = append(wait, span{r.Queued, waitEnd})
	}
	slices.Sort(waits)
	// Nearest rank of 8 waits: the 4th for p50, the 8th for p90.
	if o.WaitP50MS != waits[3] || o.WaitP90MS != waits[7] || o.WaitMaxMS != waits[7] {
		t.Errorf("waits p50/p90/max %d/%d/%d ms, want %d/%d/%d (of %v)", o.WaitP50MS, o.WaitP90MS, o.WaitMaxMS, waits[3], waits[7], waits[7], waits)
	}
	near := func(what string, got, want, slack int64) {
		t.Helper()
		if got < want-slack || got > want+slack {
			t.Errorf("%s: %d ms, want %d ± %d", what, got, want, slack)
		}
	}
	slack := int64(len(recs)) * 2 // a millisecond's rounding per end
	near("GPU time held", s.GPUHeldMS, heldMS, slack)
	near(dayOwner+"'s GPU time held", o.GPUHeldMS, heldMS, slack)
	if len(s.Rows) != 1 || s.Rows[0].Lock != lockPath || s.Rows[0].Device != "" {
		t.Fatalf("timeline rows %+v, want one, of %s", s.Rows, lockPath)
	}
	row := s.Rows[0]
	busy := grid(since, until, held)
	waiting := grid(since, until, wait)
	var busyMS, idleWaitMS int64
	for i := range busy {
		if busy[i] {
			busyMS++
		} else if waiting[i] {
			idleWaitMS++
		}
	}
	near("busy", row.BusyMS, busyMS, slack)
	near("idle", row.IdleMS, until.Sub(since).Milliseconds()-busyMS, slack)
	near("idle while someone waited", row.IdleWhileWaitingMS, idleWaitMS, slack)
	// What the report cannot know: the SIGKILLed holder wrote no line,
	// so the deferred job's second of waiting on it shows as idle.
	if row.IdleWhileWaitingMS < 1000 {
		t.Errorf("idle while someone waited %d ms, want at least the deferred job's 1 s", row.IdleWhileWaitingMS)
	}
	if row.Jobs != len(theDay) || len(row.Bars) != countStarted(theDay) {
		t.Errorf("the timeline: %d jobs, %d bars; want %d, %d", row.Jobs, len(row.Bars), len(theDay), countStarted(theDay))
	}
	if !slices.Equal(s.Reader.Files, []string{journalPath}) || len(s.Reader.SetAside) != 0 || len(s.Reader.Missing) != 0 || s.Outside == "" {
		t.Errorf("the reader: %+v, outside %q", s.Reader, s.Outside)
	}
}

// span is a time from one instant to another.
type span struct{ from, to time.Time }

// grid marks, for each millisecond from since to until, whether one of the
// spans covers it.
func grid(since, until time.Time, spans []span) []bool {
	g := make([]bool, until.Sub(since).Milliseconds())
	for _, s := range spans {
		a, b := s.from.Sub(since).Milliseconds(), s.to.Sub(since).Milliseconds()
		for i := max(a, 0); i < min(b, int64(len(g))); i++ {
			g[i] = true
		}
	}
	return g
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
