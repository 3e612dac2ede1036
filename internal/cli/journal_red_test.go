package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/lock"
	"github.com/gpuexec/gpuexec/supervisor"
)

// The job's line must be written whatever the wall clock did while the
// job ran: a clock stepped back or forward (NTP, a suspended machine, a
// clock set by hand) makes the wall times of End disagree with the
// durations measured on the monotonic clock, or run backwards. The line
// is the job's record all the same: it must pass journal.Line.
func TestJobJournalRecordSurvivesAClockStep(t *testing.T) {
	// Wall times alone (no monotonic reading), as End's times read when
	// the wall clock was stepped between two of them.
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name                   string
		queued, started, ended time.Time
	}{
		{"stepped back while it ran", t0, t0.Add(time.Second), t0.Add(-time.Hour)},
		{"stepped back while it waited", t0, t0.Add(-time.Hour), t0.Add(-time.Hour + time.Minute)},
		{"stepped back, never started", t0, time.Time{}, t0.Add(-time.Hour)},
	}
	j := &jobJournal{path: "unused", cfg: supervisor.Config{Lock: lock.Options{Owner: "o", Slug: "s", Path: "/l/gpu.lock"}}, argv: []string{"render"}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := supervisor.End{Outcome: supervisor.OK, Queued: tt.queued, Started: tt.started, Ended: tt.ended}
			if tt.started.IsZero() {
				e.Outcome, e.Status = supervisor.Deferred, 75
			}
			r := j.record(e)
			if _, err := journal.Line(r); err != nil {
				t.Fatalf("the job's line is refused: %v (%+v)", err, r)
			}
			if r.WaitedMS < 0 || r.HeldMS < 0 {
				t.Errorf("negative durations: waited %d, held %d", r.WaitedMS, r.HeldMS)
			}
		})
	}
}

// A lock's path may be as long as the OS allows (PATH_MAX, 4096 bytes on
// Linux), and --timeout as long as a duration: the job's line is written
// all the same.
func TestJobJournalRecordOfLongPathAndTimeout(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	e := supervisor.End{Outcome: supervisor.OK, Queued: t0, Started: t0.Add(time.Second), Ended: t0.Add(time.Minute)}
	tests := []struct {
		name    string
		path    string
		timeout time.Duration
	}{
		{"a lock path of 4000 bytes", "/" + strings.Repeat("d/", 2000) + "gpu.lock", 0},
		{"--timeout 9000h", "/l/gpu.lock", 9000 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := &jobJournal{path: "unused", cfg: supervisor.Config{Lock: lock.Options{Owner: "o", Slug: "s", Path: tt.path}, Timeout: tt.timeout}, argv: []string{"render"}}
			if _, err := journal.Line(j.record(e)); err != nil {
				t.Fatalf("the job's line is refused: %v", err)
			}
		})
	}
}

// A member of the group can append lines that end in the future (year
// 9999: a valid record): top's last jobs are the latest by their end, so
// ten such lines would stand for the last jobs for ever, and hide every
// job that really ended. Records that end after the snapshot (with a
// minute for another host's clock) are not among the last jobs.
func TestTopLastJobsAreNotFromTheFuture(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gpu.lock.journal")
	now := time.Now().UTC()
	var b strings.Builder
	b.WriteString(journalLine(t, "real", "job", journal.OK, 0, time.Second, time.Minute, now.Add(-time.Minute)))
	for i := range topJobs {
		b.WriteString(journalLine(t, "from", "future", journal.OK, 0, time.Second, time.Minute, time.Date(9999, 12, 1, 0, i, 0, 0, time.UTC)))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	rd := &topReader{journals: []string{path}, tails: map[string]*journalTail{}}
	jobs, note := rd.lastJobs()
	if len(jobs) != 1 || jobs[0].Owner != "real" {
		t.Errorf("last jobs: %d, the last %+v; want the real one alone", len(jobs), jobs[len(jobs)-1])
	}
	if !strings.Contains(note, "future") {
		t.Errorf("note %q does not say that lines from the future were left out", note)
	}
}
