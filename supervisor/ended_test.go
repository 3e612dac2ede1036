package supervisor

import (
	"syscall"
	"testing"
)

// Every way a job that held the lock ends maps to one outcome; the status
// is Run's.
func TestFillMapsEveryEnding(t *testing.T) {
	tests := []struct {
		name   string
		r      ran
		code   int
		want   Outcome
		signal string
	}{
		{"ok", ran{}, 0, OK, ""},
		{"failed", ran{}, 3, Failed, ""},
		{"killed by a signal gpuexec did not send", ran{}, 137, Failed, ""},
		{"not started", ran{}, ExitCannotExec, Failed, ""},
		{"timeout", ran{timedOut: true}, ExitTimeout, Timeout, ""},
		{"timeout, but it exited 0", ran{timedOut: true}, 0, OK, ""},
		{"lost", ran{lost: true}, ExitFailed, Lost, ""},
		{"over budget", ran{over: true}, ExitOverBudget, OverBudget, ""},
		{"a forwarded signal", ran{signal: syscall.SIGTERM}, 143, Interrupted, "SIGTERM"},
		{"its context ended", ran{ctxEnded: true}, 143, Interrupted, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e End
			tt.r.fill(&e, tt.code)
			if e.Outcome != tt.want || e.Status != tt.code || e.Signal != tt.signal {
				t.Errorf("fill = %s status %d signal %q, want %s status %d signal %q", e.Outcome, e.Status, e.Signal, tt.want, tt.code, tt.signal)
			}
		})
	}
}
