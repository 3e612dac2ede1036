//go:build unix

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// A positive duration below a nanosecond is 1ns, never 0 (no timeout):
// the job is stopped at once, 124.
func TestTimeoutBelowANanosecond(t *testing.T) {
	t.Parallel()
	for _, value := range []string{"0.0000000001s", "+0.0001ns"} {
		t.Run(value, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			r := gx(t, tmpEnv(t), "--lock", lock, "--timeout", value, "--", "sleep", "5")
			wantCode(t, r, 124)
			wantNoLock(t, lock)
			wantOnlyGuard(t, dir)
		})
	}
	dir, lock := lockIn(t)
	r := gx(t, tmpEnv(t, "GPUEXEC_TIMEOUT=0.0000000001s"), "--lock", lock, "--", "sleep", "5")
	wantCode(t, r, 124)
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

// --kill-after never sends the first signal alone: a job that ignores it
// runs on (and holds the lock) until it exits by itself, unkilled.
// --kill-after 0 still sends SIGKILL with the first signal.
func TestKillAfterNever(t *testing.T) {
	t.Parallel()
	t.Run("never", func(t *testing.T) {
		t.Parallel()
		dir, lock := lockIn(t)
		tmp := t.TempDir()
		got, release := filepath.Join(tmp, "got-term"), filepath.Join(tmp, "release")
		script := `trap 'touch "$GOT"' TERM; until [ -e "$RELEASE" ]; do sleep 0.02; done; exit 0`
		p := startProc(t, gpuexecCmd(tmpEnv(t, "GOT="+got, "RELEASE="+release),
			"--lock", lock, "--timeout", "100ms", "--kill-after", "never", "--", "sh", "-c", script))
		testsupport.Await(t, long, "the job to get SIGTERM", func() bool {
			_, err := os.Stat(got)
			return err == nil || p.exited()
		})
		// Not a synchronisation: a window in which a "never" read as a
		// short grace (0, 1ns) would have killed the job. It must still
		// run, and hold the lock.
		time.Sleep(300 * time.Millisecond)
		if p.exited() {
			t.Fatalf("gpuexec ended before the job did: %s\nstderr:\n%s", p.cmd.ProcessState, p.stderr())
		}
		if !lockExists(lock) {
			t.Fatal("the lock was released while the job runs")
		}
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		r := p.wait(t)
		wantCode(t, r, 124)
		if strings.Contains(r.stderr, "killing") {
			t.Errorf("SIGKILL was sent:\n%s", r.stderr)
		}
		wantNoLock(t, lock)
		wantOnlyGuard(t, dir)
	})
	t.Run("0", func(t *testing.T) {
		t.Parallel()
		dir, lock := lockIn(t)
		r := gx(t, tmpEnv(t), "--lock", lock, "--timeout", "100ms", "--kill-after", "0", "--",
			"sh", "-c", `trap '' TERM; sleep 30 & wait; sleep 30`)
		wantCode(t, r, 124)
		if !strings.Contains(r.stderr, "killing its process group") {
			t.Errorf("no SIGKILL said:\n%s", r.stderr)
		}
		wantNoLock(t, lock)
		wantOnlyGuard(t, dir)
	})
}

// --wait forever is still ended by a signal while it waits (130).
func TestWaitForeverInterrupted(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	startHolder(t, lock)
	w := startProc(t, gpuexecCmd(tmpEnv(t, role("exit")), "--lock", lock, "--wait", "forever", "--", helperBin, "0"))
	awaitLog(t, w, "waiting for GPU lock")
	if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	r := w.wait(t)
	wantCode(t, r, 130)
	if strings.Contains(r.stderr, "job started") {
		t.Errorf("the job ran:\n%s", r.stderr)
	}
}

// --kill-after never is the job's own ending, not the next holder's card:
// a lock lost while the job runs (here a forced clear) still ends a job
// that ignores SIGTERM, with SIGKILL after the default grace (10 s).
func TestKillAfterNeverStillEndsAJobWhoseLockIsLost(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	p := startProc(t, gpuexecCmd(tmpEnv(t), "--lock", lock, "--kill-after", "never", "--",
		"sh", "-c", `trap '' TERM; while :; do sleep 0.05; done`))
	testsupport.Await(t, long, "the job to start under the lock", func() bool {
		b, _ := os.ReadFile(lock)
		return strings.Contains(string(b), `"childStart"`)
	})
	wantCode(t, gx(t, nil, "--lock", lock, "clear", "--force"), 0)
	r := p.wait(t) // within 20 s: lost within a second, SIGKILL 10 s later
	wantCode(t, r, 125)
	if !strings.Contains(r.stderr, "killing its process group") {
		t.Errorf("want the job killed after the grace:\n%s", r.stderr)
	}
}

// With --kill-after never, processes the job left behind that ignore
// SIGTERM keep gpuexec waiting for them; a signal to gpuexec then kills
// them (it is the only end of that wait).
func TestKillAfterNeverLeftoversEndOnASignal(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	pidFile := filepath.Join(t.TempDir(), "leftover")
	// The leftover ignores SIGTERM from its start (inherited), and the
	// job exits once it runs.
	left := `echo $$ >"$PIDFILE"; while :; do sleep 0.05; done`
	p := startProc(t, gpuexecCmd(tmpEnv(t, "PIDFILE="+pidFile, "LEFT="+left), "--lock", lock, "--kill-after", "never", "--",
		"sh", "-c", `trap '' TERM; sh -c "$LEFT" & until [ -s "$PIDFILE" ]; do sleep 0.01; done; exit 0`))
	testsupport.Await(t, long, "gpuexec to stop what the job left", func() bool {
		return strings.Contains(p.stderr(), "left processes behind")
	})
	if p.exited() {
		t.Fatalf("gpuexec ended while the leftover ignoring SIGTERM runs:\n%s", p.stderr())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := p.wait(t)
	if !strings.Contains(r.stderr, "killing the processes left by the job") {
		t.Errorf("want the leftovers killed on SIGTERM:\n%s", r.stderr)
	}
	wantNoLock(t, lock)
}
