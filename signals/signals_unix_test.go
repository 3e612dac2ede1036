//go:build unix

package signals

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCaughtNeverIncludesRuntimeSignals(t *testing.T) {
	for _, s := range catchable {
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
			if sig != 0 && signalIgnored(sig) {
				t.Skipf("%s was ignored when this test started: it stays ignored", Name(sig))
			}
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

// helperEnv makes this test binary, run again by a test, play the helper
// of TestIgnoredAtStartStayIgnored.
const helperEnv = "GPUEXEC_SIGNALS_TEST_HELPER"

// TestMain runs the helper when asked: it prints the signals Caught() holds,
// registers them with Notify and Ending, then sends itself SIGHUP and
// SIGINT, and exits 0 if it is still there.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "1" {
		os.Exit(m.Run())
	}
	var names []string
	for _, s := range Caught() {
		names = append(names, Name(s))
	}
	fmt.Println(strings.Join(names, " "))
	_, stop := Notify()
	defer stop()
	_, ended := Ending(context.Background())
	defer ended()
	for _, s := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if signalIgnored(s) {
			syscall.Kill(os.Getpid(), s)
		}
	}
	// A signal sent to oneself is delivered before kill returns; one
	// that was caught would be on Notify's channel, and one with its
	// default action would have ended the process.
	os.Exit(0)
}

// signalIgnored reports whether s is among those Caught leaves out.
func signalIgnored(s syscall.Signal) bool { return !slices.Contains(Caught(), os.Signal(s)) }

// A SIGHUP or SIGINT ignored when the program starts (nohup, a script's
// "cmd &") is not caught, so it stays ignored: it does not end the program
// and a child inherits it. Every other signal is caught as before.
func TestIgnoredAtStartStayIgnored(t *testing.T) {
	tests := []struct {
		name    string
		trap    string // what the shell ignores before it runs the helper
		without []string
	}{
		{"none ignored", "", nil},
		{"nohup", "trap '' HUP;", []string{"SIGHUP"}},
		{"a script's background command", "trap '' INT QUIT;", []string{"SIGINT"}},
		{"both", "trap '' HUP INT;", []string{"SIGHUP", "SIGINT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("sh", "-c", tt.trap+` exec "$0" -test.run='^$'`, os.Args[0])
			cmd.Env = append(os.Environ(), helperEnv+"=1")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("the helper: %v (%q)", err, out)
			}
			got := strings.Fields(string(out))
			for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT} {
				name := Name(sig)
				// What this test binary was started with ignored,
				// the helper inherits too.
				want := !slices.Contains(tt.without, name) && !signalIgnored(sig)
				if slices.Contains(got, name) != want {
					t.Errorf("Caught() = %v: %s caught is %v, want %v", got, name, !want, want)
				}
			}
		})
	}
}
