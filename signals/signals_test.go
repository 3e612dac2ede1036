package signals

import (
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// SIGINT and SIGTERM are caught everywhere (unless ignored at start: see
// TestIgnoredAtStartStayIgnored). On Windows Go delivers Ctrl+C and
// Ctrl+Break as os.Interrupt (SIGINT), and closing the console, logging off
// and shutting down as SIGTERM.
func TestCaughtIncludesIntAndTerm(t *testing.T) {
	for _, want := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		if !slices.Contains(catchable, want) {
			t.Errorf("%v is not caught", want)
		}
	}
	// SIGTERM's inherited SIG_IGN is replaced by the runtime's handler:
	// it is caught whatever the test binary inherited.
	if !slices.Contains(Caught(), os.Signal(syscall.SIGTERM)) {
		t.Errorf("SIGTERM is not in Caught() = %v", Caught())
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

// Parse takes the names and numbers every OS shares, in any case, with or
// without SIG, and refuses what is no signal with one line.
func TestParseCommon(t *testing.T) {
	tests := []struct {
		in   string
		want os.Signal // nil: an error
	}{
		{"TERM", syscall.SIGTERM},
		{"term", syscall.SIGTERM},
		{"SIGTERM", syscall.SIGTERM},
		{"sigterm", syscall.SIGTERM},
		{" Term ", syscall.SIGTERM},
		{"15", syscall.SIGTERM},
		{"INT", syscall.SIGINT},
		{"2", syscall.SIGINT},
		{"KILL", syscall.SIGKILL},
		{"9", syscall.SIGKILL},
		{"", nil},
		{"SIG", nil},
		{"FOO", nil},
		{"SIGFOO", nil},
		{"0", nil},
		{"-15", nil},
		{"999", nil},
		{"15s", nil},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		switch {
		case tt.want == nil && err == nil:
			t.Errorf("Parse(%q) = %v, want an error", tt.in, got)
		case tt.want == nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("Parse(%q): error %q is not one line", tt.in, err)
		case tt.want != nil && (err != nil || got != tt.want):
			t.Errorf("Parse(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}
