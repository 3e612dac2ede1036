//go:build linux

package main

// The terminal sentinel's argument, given by a user or a script.

import (
	"bytes"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

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
