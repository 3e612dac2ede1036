//go:build linux

package cli

// The terminal sentinel: its argument given by a user or a script, and
// what it changes of a job stopped in a terminal.

import (
	"bytes"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/gpuexec/gpuexec/internal/testsupport"
	"github.com/gpuexec/gpuexec/supervisor"
)

// gpuexec --gpuexec-terminal-sentinel run by hand, its output piped
// (gpuexec --gpuexec-terminal-sentinel | less), says what it is in one
// line and exits 125: it never sits there swallowing the terminal's
// Ctrl+C, Ctrl+\ and Ctrl+Z, whatever its stdin, nor prints a NUL byte.
func TestSentinelArgumentByHand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		stdin func(t *testing.T) *os.File
	}{
		{"stdin a terminal", func(t *testing.T) *os.File {
			ptm, tty, err := pty.Open()
			if err != nil {
				t.Skipf("no pseudo-terminal here: %v", err)
			}
			t.Cleanup(func() { ptm.Close(); tty.Close() })
			return tty
		}},
		{"stdin /dev/null", func(t *testing.T) *os.File {
			f, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return f
		}},
		{"stdin a pipe", func(t *testing.T) *os.File {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close(); w.Close() })
			return r // its writer stays open: it would wait for ever
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := gpuexecCmd(nil, supervisor.SentinelArg)
			cmd.Dir = t.TempDir()
			cmd.Stdin = tt.stdin(t)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr // pipes
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				if code := cmd.ProcessState.ExitCode(); code != supervisor.ExitFailed {
					t.Errorf("exit %d (%v), want %d", code, err, supervisor.ExitFailed)
				} else if !strings.Contains(stderr.String(), "not run by hand") || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
					t.Errorf("stderr %q, want one line saying it is not run by hand", stderr.String())
				}
			case <-time.After(long):
				cmd.Process.Signal(syscall.SIGKILL)
				<-exited
				t.Fatalf("still running %s after it started by hand (stdout %q)", long, stdout.String())
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}

// Ctrl+Z in the terminal stops the job, and gpuexec with it: status shows
// both stopped (the card unused), not the job running on because the
// terminal sentinel in its group does; after fg both run again.
func TestCtrlZInATerminalShowsTheJobStopped(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	r := startInTerminal(t, "--lock", lock, "--log-level", "debug", "--", "sh", "-c", `echo $$ > "$READY"; exec sleep 300`)
	cmd, tty, out, job, exited, foreground := r.cmd, r.tty, r.out, r.job, r.exited, r.foreground
	testsupport.Await(t, long, "the sentinel to listen", func() bool { return strings.Contains(out.String(), "watching what the terminal sends") })
	testsupport.AwaitChildPGID(t, long, lock, job)

	tty.WriteString("\x1a")
	testsupport.Await(t, long, "gpuexec to stop with its job", func() bool { return procState(cmd.Process.Pid) == 'T' })
	awaitStatus(t, lock, "status to say the holder and its job are stopped", func(m map[string]any) bool {
		return m["holderProcess"] == "stopped" && m["jobProcess"] == "stopped" && m["jobGroup"] == float64(job)
	})

	// fg: the terminal is gpuexec's group's, which is continued.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testsupport.Await(t, long, "the job to have the terminal again", func() bool { return foreground() == job })
	awaitStatus(t, lock, "status to say the holder and its job run again", func(m map[string]any) bool {
		return m["holderProcess"] == "running" && m["jobProcess"] == "running"
	})
	tty.WriteString("\x03")
	select {
	case <-exited:
	case <-time.After(long):
		t.Fatalf("gpuexec still runs %s after Ctrl+C\n%s", long, out)
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit %d (%s), want 130 (the job ended by Ctrl+C)\n%s", code, cmd.ProcessState, out)
	}
}
