package cli

// Black-box tests of how gpuexec reads its duration flags: values below a
// nanosecond, negative or past the longest, --wait forever and
// --kill-after never (flags_unix_test.go has those that need a shell).

import (
	"os"
	"strings"
	"testing"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// tmpEnv is env with TMPDIR set to a temporary folder of t, so that
// nothing gpuexec or its job writes lands in the real temp dir.
func tmpEnv(t *testing.T, env ...string) []string {
	return append([]string{"TMPDIR=" + t.TempDir()}, env...)
}

// wantRefusedEarly is wantRefused (one line with want, 125), with the lock
// folder dir left uncreated.
func wantRefusedEarly(t *testing.T, r result, dir, want string) {
	t.Helper()
	wantRefused(t, r, want)
	if _, err := os.Lstat(dir); err == nil {
		t.Errorf("the lock's folder %s was created", dir)
	}
}

// --wait forever (inf, infinity, any case) queues without a deadline: its
// waiting line has no "defers in", and it takes the lock once it is free.
// -1 stays refused, pointing to forever.
func TestWaitForever(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  []string
	}{
		{args: []string{"--wait", "forever"}},
		{args: []string{"--wait", "Infinity"}},
		{env: []string{"GPUEXEC_WAIT=INF"}},
		{args: []string{"--wait", "forever", "run"}}, // given before a subcommand
	} {
		t.Run(strings.Join(append(tc.args, tc.env...), " "), func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			h := startHolder(t, lock)
			args := append(append([]string{"--lock", lock, "--report", "50ms"}, tc.args...), "--", helperBin, "7")
			w := startProc(t, gpuexecCmd(tmpEnv(t, append(tc.env, role("exit"))...), args...))
			awaitLog(t, w, "waiting for GPU lock")
			if strings.Contains(w.stderr(), "defers in") {
				t.Errorf("a wait without end gives a time it defers in:\n%s", w.stderr())
			}
			h.release()
			wantCode(t, h.p.wait(t), 0)
			r := w.wait(t)
			wantCode(t, r, 7)
			if !strings.Contains(r.stderr, "job started") {
				t.Errorf("the job did not run:\n%s", r.stderr)
			}
			wantNoLock(t, lock)
			wantOnlyGuard(t, dir)
		})
	}
	dir, lock := lockIn(t)
	r := gx(t, tmpEnv(t, role("exit")), "--lock", lock, "--wait", "-1", "--", helperBin, "0")
	wantRefusedEarly(t, r, dir, `--wait: "-1" is negative; to wait without end, write forever`)
}

// awaitLog waits until p's stderr holds s.
func awaitLog(t *testing.T, p *proc, s string) {
	t.Helper()
	testsupport.Await(t, long, "stderr to hold "+quote(s), func() bool {
		if p.exited() {
			t.Fatalf("%v exited: %s\nstderr:\n%s", p.cmd.Args, p.cmd.ProcessState, p.stderr())
		}
		return strings.Contains(p.stderr(), s)
	})
}
