//go:build unix

package signals

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
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

// Ending's context ends at a signal that ends gpuexec, and stop says
// which; without one stop says none, and the context ends with stop.
func TestEnding(t *testing.T) {
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(Name(sig), func(t *testing.T) {
			ctx, stop := Ending(context.Background())
			if sig != 0 {
				if err := syscall.Kill(os.Getpid(), sig); err != nil {
					t.Fatal(err)
				}
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
					t.Fatalf("%s did not end the context", Name(sig))
				}
			}
			got := stop()
			if sig == 0 && got != nil || sig != 0 && got != sig {
				t.Errorf("stop() = %v, want %v", got, sig)
			}
			if ctx.Err() == nil {
				t.Error("the context outlived stop")
			}
			if again := stop(); again != got {
				t.Errorf("a second stop() = %v, want %v", again, got)
			}
		})
	}
}
