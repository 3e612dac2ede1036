package cli

import (
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
