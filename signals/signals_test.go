package signals

import (
	"os"
	"slices"
	"syscall"
	"testing"
)

// SIGINT and SIGTERM are caught everywhere. On Windows Go delivers Ctrl+C
// and Ctrl+Break as os.Interrupt (SIGINT), and closing the console, logging
// off and shutting down as SIGTERM.
func TestCaughtIncludesIntAndTerm(t *testing.T) {
	for _, want := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		if !slices.Contains(Caught, want) {
			t.Errorf("%v is not caught", want)
		}
	}
}

func TestExitStatus(t *testing.T) {
	tests := []struct {
		sig  os.Signal
		want int
		name string
	}{
		{os.Interrupt, 130, "SIGINT"},
		{syscall.SIGINT, 130, "SIGINT"},
		{syscall.SIGTERM, 143, "SIGTERM"},
		{syscall.SIGKILL, 137, "SIGKILL"},
	}
	for _, tt := range tests {
		if got := ExitStatus(tt.sig); got != tt.want {
			t.Errorf("ExitStatus(%v) = %d, want %d", tt.sig, got, tt.want)
		}
		if got := Name(tt.sig); got != tt.name {
			t.Errorf("Name(%v) = %q, want %q", tt.sig, got, tt.name)
		}
	}
}
