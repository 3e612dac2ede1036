//go:build linux

package cli

// What the terminal sends a job that has it: gpuexec hears of it.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	procinfo "github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// A Ctrl+C (or Ctrl+\) typed in the terminal reaches the job, which has
// the terminal's foreground, and gpuexec hears of it: a job that ignores it
// is killed --kill-after later, as after a forwarded Ctrl+C, and gets the
// signal once, not a second time from gpuexec. The same after Ctrl+Z and
// fg, and the job keeps the terminal throughout.
func TestCtrlCInATerminalEndsAStuckJob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		key     string
		stopped bool // Ctrl+Z and fg first
	}{
		{"Ctrl+C", "\x03", false},
		{`Ctrl+\`, "\x1c", false},
		{"Ctrl+C after Ctrl+Z and fg", "\x03", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, lock := lockIn(t)
			r := startInTerminal(t, "--lock", lock, "--kill-after", "1s", "--log-level", "debug", "--",
				"sh", "-c", `ulimit -c 0; trap 'echo "sig""nal heard"' INT QUIT; echo $$ > "$READY"; while :; do sleep .2; done`)
			cmd, tty, out, job, exited, foreground := r.cmd, r.tty, r.out, r.job, r.exited, r.foreground
			// Not a condition of the test (gpuexec without it must
			// fail below, not here): keys typed before gpuexec can
			// hear them would prove nothing.
			testsupport.Poll(long, func() bool { return strings.Contains(out.String(), "watching what the terminal sends") })

			if tt.stopped {
				tty.WriteString("\x1a")
				testsupport.Await(t, long, "gpuexec to stop with its job", func() bool { return procState(cmd.Process.Pid) == 'T' })
				testsupport.Await(t, long, "the terminal to come back to gpuexec", func() bool { return foreground() == cmd.Process.Pid })
				// fg: the terminal is gpuexec's group's, which is
				// continued.
				if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				testsupport.Await(t, long, "the job to have the terminal again", func() bool { return foreground() == job })
				testsupport.Await(t, long, "the job to go on", func() bool { s := procState(job); return s != 'T' && s != 0 })
			}
			tty.WriteString(tt.key)
			select {
			case <-exited:
			case <-time.After(long):
				t.Fatalf("the job ignoring %s still runs %s after it (--kill-after 1s)\n%s", tt.name, long, out)
			}
			if code := cmd.ProcessState.ExitCode(); code != 137 {
				t.Errorf("exit %d (%s), want 137 (the job killed)\n%s", code, cmd.ProcessState, out)
			}
			if err := syscall.Kill(-job, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("the job's group is still there after gpuexec exited: kill(-%d, 0) = %v", job, err)
			}
			testsupport.Await(t, long, "the job's last words on the terminal", func() bool { return strings.Contains(out.String(), "releasing GPU lock") })
			if n := strings.Count(out.String(), "signal heard"); n != 1 {
				t.Errorf("the job got the signal %d times, want once\n%s", n, out)
			}
			if strings.Contains(out.String(), "left processes behind") {
				t.Errorf("gpuexec took a process of its own for one the job left behind\n%s", out)
			}
			wantNoLock(t, lock)
		})
	}
}

// inTerminal is a gpuexec started in a pseudo-terminal's foreground (see
// startInTerminal), its job holding the terminal.
type inTerminal struct {
	cmd    *exec.Cmd
	tty    *os.File      // the terminal's master: what is typed, what is shown
	out    *termOutput   // what the terminal showed
	job    int           // the job's pid (its group's id)
	exited chan struct{} // closed once gpuexec exited
}

// foreground is the terminal's foreground process group.
func (r *inTerminal) foreground() int {
	pg, _ := unix.IoctlGetInt(int(r.tty.Fd()), unix.TIOCGPGRP)
	return pg
}

// startInTerminal starts gpuexec with args in a pseudo-terminal of its own,
// as a shell starts a job in the foreground; its job writes its pid to
// $READY. It returns once the job has the terminal; gpuexec and the job are
// killed at the test's end. A machine without pseudo-terminals skips the
// test.
func startInTerminal(t *testing.T, args ...string) *inTerminal {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := gpuexecCmd([]string{"READY=" + ready}, args...)
	cmd.Dir = t.TempDir()
	tty, exited := startInPTY(t, cmd, nil)
	r := &inTerminal{cmd: cmd, tty: tty, out: &termOutput{}, exited: exited}
	go r.out.copy(tty)
	r.job = testsupport.AwaitPIDs(t, long, ready)[0]
	testsupport.KillOnCleanup(t, r.job)
	testsupport.Await(t, long, "the job to have the terminal", func() bool { return r.foreground() == r.job })
	return r
}

// Without a terminal gpuexec starts no process but the job.
func TestNoSentinelWithoutATerminal(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	p, pids := startShellJob(t, nil, []string{"--lock", lock}, `echo $$ > "$READY"; exec sleep 30`)
	testsupport.Await(t, long, "the job to run", func() bool { return procState(pids[0]) != 0 })
	if children, _ := procinfo.Tree(); len(children[p.pid()]) != 1 {
		t.Errorf("gpuexec has children %v, want only the job %d", children[p.pid()], pids[0])
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantCode(t, p.wait(t), 143)
}
