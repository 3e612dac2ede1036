//go:build linux

package cli

// Signals ignored when gpuexec starts stay ignored, as nohup(1), shells and
// timeout(1) keep them.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// A SIGHUP under nohup, and a SIGINT to a gpuexec that a script ran in the
// background (a shell without job control ignores SIGINT and SIGQUIT for
// it), were ignored when gpuexec started: they stay ignored, for gpuexec
// and for its job, which inherits them. Sent to gpuexec and to the job's
// group, they end neither, while it waits for the lock and while the job
// runs; the job then ends on its own and gpuexec with its status.
func TestIgnoredSignalsStayIgnored(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("nohup"); err != nil {
		t.Skip("needs nohup")
	}
	wrappers := []struct {
		name string
		sig  syscall.Signal
		// cmd runs gpuexec with args as nohup or a script would, in a
		// session of its own; gpuexec's pid is written to pidFile.
		cmd func(env []string, pidFile string, args []string) *exec.Cmd
	}{
		{"nohup", syscall.SIGHUP, func(env []string, pidFile string, args []string) *exec.Cmd {
			// nohup execs gpuexec: same pid.
			cmd := gpuexecCmd(env, args...)
			cmd.Args = append([]string{"nohup", gpuexecBin}, args...)
			cmd.Path = must(exec.LookPath("nohup"))
			return cmd
		}},
		{"a script's cmd &", syscall.SIGINT, func(env []string, pidFile string, args []string) *exec.Cmd {
			cmd := gpuexecCmd(append(env, "GX="+gpuexecBin, "GXPID="+pidFile), args...)
			cmd.Path = must(exec.LookPath("sh"))
			cmd.Args = append([]string{"sh", "-c", `"$GX" "$@" & echo $! > "$GXPID"; wait $!`, "sh"}, args...)
			return cmd
		}},
	}
	for _, w := range wrappers {
		for _, waiting := range []bool{false, true} {
			name := w.name + ", while the job runs"
			if waiting {
				name = w.name + ", while waiting for the lock"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				_, lock := lockIn(t)
				dir := t.TempDir()
				ready, gate, pidFile := filepath.Join(dir, "ready"), filepath.Join(dir, "gate"), filepath.Join(dir, "gpuexec.pid")
				job := []string{"--lock", lock, "--kill-after", "200ms", "--", "sh", "-c",
					`echo $$ > "$READY"; while [ ! -e "$GATE" ]; do sleep .05; done`}
				env := []string{"READY=" + ready, "GATE=" + gate}
				var holder *proc
				holdGate := filepath.Join(dir, "hold-gate")
				if waiting {
					holder, _ = startShellJob(t, []string{"GATE=" + holdGate}, []string{"--lock", lock},
						`echo $$ > "$READY"; while [ ! -e "$GATE" ]; do sleep .05; done`)
				}
				cmd := w.cmd(env, pidFile, job)
				cmd.Dir = dir
				cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
				p := startProc(t, cmd)
				gx := p.pid()
				if w.name != "nohup" {
					gx = testsupport.AwaitPIDs(t, long, pidFile)[0]
					testsupport.KillOnCleanup(t, gx)
				}
				if waiting {
					testsupport.Await(t, long, "gpuexec to queue", func() bool { return queueLen(t, lock) == 1 })
					if err := syscall.Kill(gx, w.sig); err != nil {
						t.Fatal(err)
					}
					testsupport.StillBlocked(t, time.Second, "gpuexec ended by "+unix.SignalName(w.sig)+" while it waits", p.exited)
					if err := os.WriteFile(holdGate, nil, 0o644); err != nil {
						t.Fatal(err)
					}
					wantCode(t, holder.wait(t), 0)
				}
				pid := testsupport.AwaitPIDs(t, long, ready)[0]
				testsupport.KillOnCleanup(t, pid)
				if !ignores(t, pid, w.sig) {
					t.Errorf("the job does not ignore %s, which gpuexec was started with ignored", unix.SignalName(w.sig))
				}
				for _, target := range []int{gx, -pid} {
					if err := syscall.Kill(target, w.sig); err != nil {
						t.Fatal(err)
					}
				}
				testsupport.StillBlocked(t, time.Second, "gpuexec or its job ended by "+unix.SignalName(w.sig), func() bool { return p.exited() || procState(pid) == 0 || procState(pid) == 'Z' })
				if err := os.WriteFile(gate, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				r := p.wait(t)
				wantCode(t, r, 0)
				wantNoLock(t, lock)
			})
		}
	}
}

// ignores reports whether process pid ignores sig (SigIgn in its
// /proc/PID/status).
func ignores(t *testing.T, pid int, sig syscall.Signal) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("SigIgn of %d: %v", pid, err)
			}
			return mask&(1<<(uint(sig)-1)) != 0
		}
	}
	t.Fatalf("no SigIgn in /proc/%d/status", pid)
	return false
}
