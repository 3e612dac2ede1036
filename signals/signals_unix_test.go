//go:build unix

package signals

import (
	"strconv"
	"syscall"
	"testing"
)

func TestCaughtNeverIncludesRuntimeSignals(t *testing.T) {
	for _, s := range Caught {
		if s == syscall.SIGURG || s == syscall.SIGCHLD || s == syscall.SIGKILL {
			t.Errorf("%v must never be caught", s)
		}
	}
}

// On Unix Parse takes any signal but the job-control ones, which would not
// end a job (gpuexec follows each signal with SIGCONT).
func TestParseUnix(t *testing.T) {
	tests := []struct {
		in   string
		want syscall.Signal // 0: an error
	}{
		{"HUP", syscall.SIGHUP},
		{"sighup", syscall.SIGHUP},
		{"USR1", syscall.SIGUSR1},
		{"usr2", syscall.SIGUSR2},
		{"QUIT", syscall.SIGQUIT},
		{strconv.Itoa(int(syscall.SIGUSR1)), syscall.SIGUSR1},
		{"STOP", 0},
		{"TSTP", 0},
		{"SIGCONT", 0},
		{"ttin", 0},
		{strconv.Itoa(int(syscall.SIGSTOP)), 0},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		switch {
		case tt.want == 0 && err == nil:
			t.Errorf("Parse(%q) = %v, want an error", tt.in, got)
		case tt.want != 0 && (err != nil || got != tt.want):
			t.Errorf("Parse(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	if n := Name(syscall.SIGUSR1); n != "SIGUSR1" {
		t.Errorf("Name(SIGUSR1) = %q", n)
	}
}
