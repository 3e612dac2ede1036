//go:build unix

package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// Environment of the critical role.
const (
	truthEnv   = "GPUEXEC_TEST_TRUTH"   // file the job flocks to prove it is alone
	overlapEnv = "GPUEXEC_TEST_OVERLAP" // where a job that was not alone says so
	countEnv   = "GPUEXEC_TEST_COUNT"   // where every job appends one line
)

func init() {
	// ids: write "pid pgid" to $GPUEXEC_TEST_OUT.
	helperRoles["ids"] = func(args []string) int {
		s := fmt.Sprintf("%d %d\n", os.Getpid(), syscall.Getpgrp())
		if err := testsupport.WriteAtomic(os.Getenv(outEnv), []byte(s)); err != nil {
			fmt.Fprintln(os.Stderr, "helper ids:", err)
			return 2
		}
		return 0
	}
	// critical: a job that proves it runs alone. It takes a non-blocking
	// flock on $GPUEXEC_TEST_TRUTH, which fails if another job holds it at
	// the same time; it then appends a line to $GPUEXEC_TEST_OVERLAP. It
	// holds the flock for a few milliseconds of "work", appends one line to
	// $GPUEXEC_TEST_COUNT and exits 0.
	helperRoles["critical"] = func(args []string) int {
		if os.Getenv("GPUEXEC_LOCK_HELD") != "1" {
			appendLine(os.Getenv(overlapEnv), fmt.Sprintf("pid %d: GPUEXEC_LOCK_HELD is not 1", os.Getpid()))
		}
		f, err := os.OpenFile(os.Getenv(truthEnv), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper critical:", err)
			return 2
		}
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			appendLine(os.Getenv(overlapEnv), fmt.Sprintf("pid %d: %v", os.Getpid(), err))
		} else {
			defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
		}
		time.Sleep(3 * time.Millisecond) // the job's work, under the lock
		if err := appendLine(os.Getenv(countEnv), strconv.Itoa(os.Getpid())); err != nil {
			fmt.Fprintln(os.Stderr, "helper critical:", err)
			return 2
		}
		return 0
	}
}

// appendLine appends line in one write.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	return errors.Join(err, f.Close())
}

func TestExitStatusUnix(t *testing.T) {
	t.Parallel()
	testExitCases(t, []exitCase{
		{name: "child's code", want: 3, args: func(t *testing.T, lock string) []string {
			return []string{"--lock", lock, "--", "sh", "-c", "exit 3"}
		}},
		{name: "zero", want: 0, args: func(t *testing.T, lock string) []string {
			return []string{"--lock", lock, "--", "true"}
		}},
		{name: "killed by a signal", want: 128 + int(syscall.SIGUSR1), args: func(t *testing.T, lock string) []string {
			return []string{"--lock", lock, "--", "sh", "-c", "kill -USR1 $$"}
		}},
		{name: "run subcommand", want: 4, args: func(t *testing.T, lock string) []string {
			return []string{"run", "--lock", lock, "--", "sh", "-c", "exit 4"}
		}},
		{name: "timeout", want: 124, stderr: "--timeout", args: func(t *testing.T, lock string) []string {
			return []string{"--lock", lock, "--timeout", "200ms", "--", "sleep", "30"}
		}},
		{name: "not executable", want: 126, stderr: "not executable", args: func(t *testing.T, lock string) []string {
			file := filepath.Join(t.TempDir(), "job.sh")
			if err := os.WriteFile(file, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{"--lock", lock, "--", file}
		}},
	})
}

// A waiter interrupted by SIGINT or SIGTERM exits 130 or 143, leaving the
// holder's lock alone and nothing of its own behind.
func TestInterruptWhileWaiting(t *testing.T) {
	t.Parallel()
	cases := []struct {
		sig  syscall.Signal
		want int
	}{
		{syscall.SIGINT, 130},
		{syscall.SIGTERM, 143},
	}
	for _, tc := range cases {
		t.Run(tc.sig.String(), func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			h := startHolder(t, lock)
			before := readRecord(t, lock)
			w := startProc(t, gpuexecCmd(nil, "--lock", lock, "--wait", "10m", "--poll", "10ms", "--", "true"))
			testsupport.Await(t, long, "the waiter to log that it waits", func() bool {
				return strings.Contains(w.stderr(), "waiting for GPU lock")
			})
			if err := w.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			r := w.wait(t)
			wantCode(t, r, tc.want)
			if strings.Contains(r.stderr, "job started") {
				t.Errorf("the job ran:\n%s", r.stderr)
			}
			if after := readRecord(t, lock); after.Token != before.Token || after.PID != h.p.pid() {
				t.Fatalf("the holder's lock changed: %+v, was %+v", after, before)
			}
			h.release()
			wantCode(t, h.p.wait(t), 0)
			wantNoLock(t, lock)
			wantOnlyGuard(t, dir)
		})
	}
}

// startShellJob starts gpuexec [args] -- sh -c script with the environment
// variables env, and returns it once the job wrote a line of pids into
// $READY.
func startShellJob(t *testing.T, env []string, args []string, script string) (*proc, []int) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	args = append(args, "--", "sh", "-c", script)
	p := startProc(t, gpuexecCmd(append([]string{"READY=" + ready}, env...), args...))
	pids := testsupport.AwaitPIDs(t, long, ready)
	for _, pid := range pids {
		testsupport.KillOnCleanup(t, pid)
	}
	return p, pids
}

func TestSigtermIsForwardedToTheJob(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	mark := filepath.Join(t.TempDir(), "mark")
	p, _ := startShellJob(t, []string{"MARK=" + mark}, []string{"--lock", lock},
		`trap 'echo got-term > "$MARK"; exit 7' TERM; echo $$ > "$READY"; while :; do sleep 0.05; done`)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := p.wait(t)
	wantCode(t, r, 7)
	if b, err := os.ReadFile(mark); err != nil || strings.TrimSpace(string(b)) != "got-term" {
		t.Errorf("the job's TERM trap did not run: %q, %v", b, err)
	}
	if !strings.Contains(r.stderr, "SIGTERM") {
		t.Errorf("stderr does not log the forwarded SIGTERM:\n%s", r.stderr)
	}
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

func TestJobIgnoringSigtermIsKilledAfterGrace(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	p, pids := startShellJob(t, nil, []string{"--lock", lock, "--kill-after", "300ms"},
		`trap '' TERM; echo $$ > "$READY"; while :; do sleep 0.05; done`)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := p.wait(t)
	wantCode(t, r, 128+int(syscall.SIGKILL))
	if !testsupport.Gone(pids[0]) {
		t.Errorf("the job (pid %d) still runs after gpuexec exited", pids[0])
	}
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

func TestTimeoutStopsTheWholeGroup(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, script string }{
		{"grandchild obeys SIGTERM", `sleep 300 & echo $! > "$READY"; wait`},
		{"grandchild ignores SIGTERM", `trap '' TERM; sleep 300 & echo $! > "$READY"; wait`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			p, pids := startShellJob(t, nil, []string{"--lock", lock, "--timeout", "1s", "--kill-after", "300ms"}, tc.script)
			r := p.wait(t)
			wantCode(t, r, 124)
			testsupport.Await(t, long, fmt.Sprintf("the grandchild sleep (pid %d) to be gone", pids[0]), func() bool {
				return testsupport.Gone(pids[0])
			})
			wantNoLock(t, lock)
			wantOnlyGuard(t, dir)
		})
	}
}

func TestJobLeadsItsOwnProcessGroup(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	out := filepath.Join(t.TempDir(), "ids")
	wantCode(t, gx(t, []string{role("ids"), outEnv + "=" + out}, "--lock", lock, "--", helperBin), 0)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var pid, pgid int
	if _, err := fmt.Sscan(string(b), &pid, &pgid); err != nil {
		t.Fatalf("ids %q: %v", b, err)
	}
	if pid != pgid {
		t.Errorf("job pid %d is in process group %d, want a group of its own", pid, pgid)
	}
	if pgid == syscall.Getpgrp() {
		t.Errorf("job is in the test's process group %d", pgid)
	}
}

// Processes the job leaves in its group are stopped before gpuexec releases
// the lock and exits.
func TestLeftoversAreStoppedBeforeExit(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	r := gx(t, []string{"PIDFILE=" + pidFile}, "--lock", lock, "--kill-after", "5s", "--",
		"sh", "-c", `sleep 300 >/dev/null 2>&1 & echo $! > "$PIDFILE"; exit 0`)
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	testsupport.KillOnCleanup(t, pid)
	wantCode(t, r, 0)
	if !testsupport.Gone(pid) {
		t.Errorf("the job's leftover sleep (pid %d) still runs after gpuexec exited", pid)
	}
	if !strings.Contains(r.stderr, "left processes") {
		t.Errorf("stderr does not log the leftovers:\n%s", r.stderr)
	}
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

// After SIGKILL, gpuexec cannot release the lock: its job dies with it
// (Pdeathsig) and the next job clears the lock as its pid is gone.
func TestKilledGpuexecTakesItsJobAlong(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux-only")
	}
	dir, lock := lockIn(t)
	p, pids := startShellJob(t, nil, []string{"--lock", lock, "--owner", "killed", "--slug", "job"},
		`echo $$ > "$READY"; exec sleep 300`)
	job := pids[0]
	testsupport.AwaitChildPGID(t, long, lock, job)
	gpid := p.pid()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	testsupport.Await(t, long, fmt.Sprintf("the job (pid %d) to die with gpuexec", job), func() bool { return testsupport.Gone(job) })
	// Once the dead job is reaped, the lock is stale.
	var m map[string]any
	testsupport.Await(t, long, "status to say stale", func() bool {
		m = testsupport.StatusJSON(t, long, gpuexecBin, lock)
		return m["state"] == "stale"
	})
	if s, _ := m["staleReason"].(string); !strings.Contains(s, fmt.Sprintf("pid %d", gpid)) {
		t.Errorf("staleReason %q does not name gpuexec's pid %d", s, gpid)
	}
	r := gx(t, nil, "--lock", lock, "--wait", "5s", "--poll", "10ms", "--", "true")
	wantCode(t, r, 0)
	if !strings.Contains(r.stderr, "cleared stale GPU lock") || !strings.Contains(r.stderr, fmt.Sprintf("pid %d is gone", gpid)) {
		t.Errorf("stderr does not log clearing the lock as pid %d is gone:\n%s", gpid, r.stderr)
	}
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

// After SIGKILL of gpuexec, a process of the job's group that survives keeps
// the lock held until it is gone.
func TestKilledGpuexecLeftoverKeepsTheLock(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux-only")
	}
	dir, lock := lockIn(t)
	p, pids := startShellJob(t, nil, []string{"--lock", lock, "--owner", "killed", "--slug", "job"},
		`sleep 300 & echo $$ $! > "$READY"; wait`)
	if len(pids) != 2 {
		t.Fatalf("job wrote %v, want its pid and its sleep's", pids)
	}
	shell, sleep := pids[0], pids[1]
	testsupport.AwaitChildPGID(t, long, lock, shell)
	gpid := p.pid()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	testsupport.Await(t, long, fmt.Sprintf("the job's shell (pid %d) to die with gpuexec", shell), func() bool { return testsupport.Gone(shell) })
	if testsupport.Gone(sleep) {
		t.Fatalf("the job's sleep (pid %d) died too; nothing left to test", sleep)
	}

	m := testsupport.StatusJSON(t, long, gpuexecBin, lock)
	if m["state"] != "held" || m["alive"] != true {
		t.Errorf("status --json with the job's group still running: %v, want held and alive", m)
	}
	r := gx(t, nil, "--lock", lock, "--wait", "0", "--", "true")
	wantCode(t, r, 75)
	if !strings.Contains(r.stderr, fmt.Sprintf("killed/job (pid %d)", gpid)) {
		t.Errorf("stderr does not name the holder killed/job (pid %d):\n%s", gpid, r.stderr)
	}

	if err := syscall.Kill(sleep, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testsupport.Await(t, long, "the leftover sleep to die", func() bool { return testsupport.Gone(sleep) })
	r = gx(t, nil, "--lock", lock, "--wait", "5s", "--poll", "10ms", "--", "true")
	wantCode(t, r, 0)
	if !strings.Contains(r.stderr, "cleared stale GPU lock") {
		t.Errorf("stderr does not log clearing the stale lock:\n%s", r.stderr)
	}
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

// runContenders runs procs goroutines, each starting gpuexec rounds times in
// sequence with args(i, j) and env, and fails the test for every run that
// did not exit 0 within timeout.
func runContenders(t *testing.T, procs, rounds int, timeout time.Duration, env []string, args func(i, j int) []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, procs*rounds)
	for i := range procs {
		wg.Go(func() {
			for j := range rounds {
				code, out, err := contextRun(timeout, gpuexecBin, env, args(i, j)...)
				if err == nil && code != 0 {
					err = fmt.Errorf("exit status %d", code)
				}
				if err != nil {
					errs <- fmt.Errorf("process %d round %d: %v\n%s", i, j, err, out)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// wantAllRanAlone fails the test for each line in overlap (what a job that
// was not alone wrote) and unless count has a line for each of n jobs.
func wantAllRanAlone(t *testing.T, overlap, count string, n int) {
	t.Helper()
	if b, err := os.ReadFile(overlap); err == nil {
		t.Errorf("jobs overlapped:\n%s", b)
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Error(err)
	}
	b, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	if ran := len(lines(string(b))); ran != n {
		t.Errorf("%d jobs ran, want %d", ran, n)
	}
}

// Many gpuexec processes on one lock run their jobs one at a time, and all
// of them run.
func TestContentionIsExclusive(t *testing.T) {
	t.Parallel()
	const procs, rounds = 8, 5
	dir, lock := lockIn(t)
	work := t.TempDir()
	truth, overlap, count := filepath.Join(work, "truth"), filepath.Join(work, "overlap"), filepath.Join(work, "count")
	env := []string{role("critical"), truthEnv + "=" + truth, overlapEnv + "=" + overlap, countEnv + "=" + count}

	runContenders(t, procs, rounds, 60*time.Second, env, func(i, j int) []string {
		return []string{"--lock", lock, "--wait", "1m", "--poll", "10ms", "--slug", fmt.Sprintf("p%d-r%d", i, j), "--", helperBin}
	})
	wantAllRanAlone(t, overlap, count, procs*rounds)
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

// A gpuexec-etcd of another release is refused with one line naming the
// mismatch, for every command, before any lock is touched: a helper of the
// first protocol (it took the first line for its request and refused an op
// it did not know), and one of a later protocol.
func TestEtcdHelperOfAnotherReleaseIsOneLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	helpers := map[string]string{
		"older": `read -r line; printf '%s\n' '{"event":"error","error":"lock: unknown request \"hello\"","kind":"invalid"}'; exit 2`,
		"newer": `read -r line; printf '%s\n' '{"event":"hello","protocol":99}'; read -r line; exit 0`,
	}
	for name, script := range helpers {
		helper := filepath.Join(dir, name)
		if err := os.WriteFile(helper, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		url := "etcd://127.0.0.1:1/gpuexec/" + name
		for _, args := range [][]string{
			{"--lock", url, "--wait", "1s", "--", "true"},
			{"--lock", url, "--wait", "0", "--", "true"},
			{"status", "--lock", url},
			{"clear", "--lock", url},
		} {
			r := gx(t, []string{"GPUEXEC_ETCD_AGENT=" + helper}, args...)
			if r.code != 125 || len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, "different releases") {
				t.Errorf("%s helper, %v: exit %d, want 125 and one line saying the releases differ:\n%s", name, args, r.code, r.stderr)
			}
		}
	}
}

// A stopped job (SIGSTOP: a terminal's Ctrl+Z, its own kill -STOP) gets
// SIGCONT right after each signal that ends it, as timeout(1) does: it ends
// at once, not at --kill-after. With the grace 30 s, a job that waited for
// it would outlast the wait for gpuexec's end (long), and log the grace.
func TestStoppedJobEndsAtOnce(t *testing.T) {
	t.Parallel()
	const selfStop = `echo $$ > "$READY"; kill -STOP $$; exit 9`
	cases := []struct {
		name   string
		args   []string
		script string
		// term: send SIGTERM to gpuexec once the job (the first pid in
		// $READY) is stopped (Linux: reads its state in /proc).
		term bool
		want int
	}{
		{name: "at --timeout", args: []string{"--timeout", "500ms"}, script: selfStop, want: 124},
		{name: "at --timeout with --signal INT", args: []string{"--timeout", "500ms", "--signal", "INT"}, script: selfStop, want: 124},
		{name: "forwarded SIGTERM", script: selfStop, term: true, want: 143},
		// The command exits, leaving a stopped process in its group:
		// drain stops it before the release.
		{name: "left behind", script: `sleep 300 & kill -STOP $!; echo $! > "$READY"; exit 0`, want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.term && runtime.GOOS != "linux" {
				t.Skip("reads process states from /proc")
			}
			dir, lock := lockIn(t)
			args := append([]string{"--lock", lock, "--kill-after", "30s"}, tc.args...)
			p, pids := startShellJob(t, nil, args, tc.script)
			if tc.term {
				testsupport.Await(t, long, "the job to stop", func() bool { return procState(pids[0]) == 'T' })
				if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			r := p.wait(t)
			wantCode(t, r, tc.want)
			if strings.Contains(r.stderr, "grace period") {
				t.Errorf("the job was killed after the grace period, not ended at once:\n%s", r.stderr)
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("ended %s after gpuexec was told, want well before --kill-after (30s)", d.Round(time.Millisecond))
			}
			testsupport.Await(t, long, fmt.Sprintf("the job's process %d to be gone", pids[0]), func() bool { return testsupport.Gone(pids[0]) })
			wantNoLock(t, lock)
			wantOnlyGuard(t, dir)
		})
	}
}

// --signal is the first signal at --timeout: the job's trap for it runs;
// KILL ends a job that ignores TERM and INT at once, not after the grace.
// The status is 124 whatever the signal.
func TestTimeoutSignal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		signal string
		trap   string // the signal the job traps, writing its name to $MARK
	}{
		{"INT", "INT"},
		{"sigint", "INT"},
		{"2", "INT"},
		{"usr1", "USR1"},
		{"HUP", "HUP"},
		{"KILL", ""},
	}
	for _, tc := range cases {
		t.Run(tc.signal, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			mark := filepath.Join(t.TempDir(), "mark")
			script := `trap '' TERM INT; `
			if tc.trap != "" {
				script += `trap 'echo ` + tc.trap + ` > "$MARK"; exit 3' ` + tc.trap + `; `
			}
			script += `echo $$ > "$READY"; while :; do sleep 0.05; done`
			// The timeout outlasts the start of the shell and its traps.
			p, pids := startShellJob(t, []string{"MARK=" + mark}, []string{"--lock", lock,
				"--timeout", "1s", "--signal", tc.signal, "--kill-after", "30s"}, script)
			r := p.wait(t)
			wantCode(t, r, 124)
			if strings.Contains(r.stderr, "grace period") {
				t.Errorf("the job was killed after the grace period:\n%s", r.stderr)
			}
			if tc.trap != "" {
				if b, err := os.ReadFile(mark); err != nil || strings.TrimSpace(string(b)) != tc.trap {
					t.Errorf("the job's %s trap did not run: %q, %v\nstderr:\n%s", tc.trap, b, err, r.stderr)
				}
			}
			if !testsupport.Gone(pids[0]) {
				t.Errorf("the job (pid %d) still runs after gpuexec exited", pids[0])
			}
			wantNoLock(t, lock)
			wantOnlyGuard(t, dir)
		})
	}
}

// The bash completion script, driven as bash drives it: it completes
// subcommands and flags by asking gpuexec, and never runs gpuexec with the
// words after "--" (the job), nor runs a job at all.
func TestBashCompletion(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	r := gx(t, nil, "completion", "bash")
	wantCode(t, r, 0)
	script := filepath.Join(t.TempDir(), "gpuexec.bash")
	if err := os.WriteFile(script, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	_, lock := lockIn(t)
	mark := filepath.Join(t.TempDir(), "the-job-ran")
	touch := "touch " + mark
	cases := []struct {
		words []string // after gpuexec; the last is the word completed
		want  []string // among the completions
		none  bool     // no completions at all
	}{
		{words: []string{"st"}, want: []string{"status"}},
		{words: []string{""}, want: []string{"run", "status", "clear", "metrics", "completion"}},
		{words: []string{"status", "--lo"}, want: []string{"--lock"}},
		{words: []string{"--lock", lock, "cl"}, want: []string{"clear"}},
		{words: []string{"--"}, want: []string{"--lock", "--wait", "--signal"}},
		{words: []string{"--lock", ""}, none: true}, // a file name, from bash
		{words: []string{"completion", ""}, want: []string{"bash", "zsh", "fish", "powershell"}},
		{words: []string{"--", "ech"}, want: []string{"echo"}},
		{words: []string{"--lock", lock, "--", "sh", "-c", touch, ""}, none: true},
		{words: []string{"--lock", lock, "--", "sh", "-c", touch, "--"}, none: true},
		{words: []string{"--lock", lock, "sh", "-c", touch, ""}},
		{words: []string{"--lock", lock, "run", "sh", "-c", touch, "-"}},
	}
	for _, tc := range cases {
		words := append([]string{gpuexecBin}, tc.words...)
		args := append([]string{"--norc", "--noprofile", "-c",
			`source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _gpuexec_complete; printf '%s\n' "${COMPREPLY[@]}"`,
			script}, words...)
		cmd := exec.Command("bash", args...)
		cmd.Env = testsupport.Env()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.words, err, out)
		}
		got := lines(strings.TrimSpace(string(out)))
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("completing %q: %q lacks %q", tc.words, got, w)
			}
		}
		if tc.none && len(got) > 0 {
			t.Errorf("completing %q: %q, want none", tc.words, got)
		}
		if _, err := os.Stat(mark); err == nil {
			t.Fatalf("completing %q ran the job", tc.words)
		}
	}
	wantNoLock(t, lock)
}
