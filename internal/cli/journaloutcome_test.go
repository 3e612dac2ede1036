package cli

import (
	"slices"
	"testing"

	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/supervisor"
)

// The supervisor's outcomes are the journal's words, one for one: the line
// of a job is journal.Outcome(end.Outcome), which Validate must accept.
func TestEveryEndIsAJournalOutcome(t *testing.T) {
	ends := []supervisor.Outcome{supervisor.OK, supervisor.Failed, supervisor.Timeout, supervisor.Deferred,
		supervisor.Interrupted, supervisor.Lost, supervisor.OverBudget, supervisor.Refused}
	for _, e := range ends {
		if !slices.Contains(journal.Outcomes, journal.Outcome(e)) {
			t.Errorf("the supervisor's outcome %q is not the journal's", e)
		}
	}
	if len(ends) != len(journal.Outcomes) {
		t.Errorf("%d supervisor outcomes, %d journal ones", len(ends), len(journal.Outcomes))
	}
}
