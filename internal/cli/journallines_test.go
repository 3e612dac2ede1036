package cli

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/journal"
)

// journalLine is a valid journal line of owner's job slug with outcome,
// which waited and held as said and ended at end.
func journalLine(t *testing.T, owner, slug string, o journal.Outcome, status int, waited, held time.Duration, end time.Time) string {
	t.Helper()
	queued := end.Add(-waited - held)
	r := journal.Record{V: journal.Version, Owner: owner, Slug: slug, Argv: []string{"render"}, User: "u", Host: "h", PID: 100,
		Lock: "/l", Queued: queued, Ended: end, WaitedMS: waited.Milliseconds(), HeldMS: held.Milliseconds(), Outcome: o, Status: status}
	if o.Ran() {
		st := queued.Add(waited)
		r.Started = &st
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("the test's record: %v", err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}
