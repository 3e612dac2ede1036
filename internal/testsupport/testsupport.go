// Package testsupport holds what the tests of this module share: awaiting a
// condition with a deadline, checking that something stays blocked, building
// a binary, a pid no process uses, the state of a process, gpuexec's status
// and a few helpers for the processes tests start.
//
// It is for tests only and imports no package of this module, so that any
// package's tests (package lock's own included) may use it.
package testsupport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tick is how often Poll, Await and StillBlocked evaluate their condition.
const tick = 5 * time.Millisecond

// Poll evaluates cond every few milliseconds until it holds, and then
// returns true; it returns false once timeout has passed with cond never
// holding. cond is evaluated at least once, and once more after the
// deadline has passed before Poll gives up.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(tick)
	defer t.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-t.C
	}
	return true
}

// Await is Poll that fails t (t.Fatalf, "timed out after TIMEOUT waiting for
// WHAT") when cond does not hold within timeout. Call it from the test's
// goroutine only; elsewhere, use Poll.
func Await(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// StillBlocked fails t (t.Fatalf) as soon as happened reports true during
// the next d: what must not happen yet has happened. happened is evaluated
// every few milliseconds and once more after d, so that anything that
// happened within d is seen. what names the event, as in "the waiter
// started". Call it from the test's goroutine only.
func StillBlocked(t testing.TB, d time.Duration, what string, happened func() bool) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(d)
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		past := !time.Now().Before(deadline)
		if happened() {
			t.Fatalf("%s after %s, while it must stay blocked for %s", what, time.Since(start).Round(time.Millisecond), d)
		}
		if past {
			return
		}
		<-tk.C
	}
}

// Env is this process's environment without any GPUEXEC_ variable, so that
// nothing inherited changes a gpuexec's flags, with GORACE set to end a
// race-enabled binary at once (by default the race detector sleeps a second
// at exit), and with extra appended.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(strings.ToUpper(kv), "GPUEXEC_") || strings.HasPrefix(kv, "GORACE=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	return append(env, extra...)
}

// Build runs go build on pkg (an import path, or a path relative to the
// current folder) and writes the binary to dir/name, with the ".exe" suffix
// on Windows; it returns the binary's path. It builds as a user does:
// without -race and without build tags, whatever this test binary was built
// with. An error carries the go command's output. It needs no testing.TB,
// for use in TestMain.
func Build(dir, name, pkg string) (string, error) {
	out := filepath.Join(dir, name+exeSuffix)
	cmd := exec.Command(goTool(), "build", "-o", out, pkg)
	cmd.Env = Env()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -o %s %s: %v\n%s", out, pkg, err, b)
	}
	return out, nil
}

// goTool is the go command: the one on PATH (go test puts its own
// GOROOT/bin first), else the one of the GOROOT this test was built with.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// exitEnv, set to 1, makes a binary that links this package exit 0 as it
// starts, before its TestMain: DeadPID's child.
const exitEnv = "GPUEXEC_TESTSUPPORT_EXIT"

func init() {
	if os.Getenv(exitEnv) == "1" {
		os.Exit(0)
	}
}

// DeadPID is the pid of a process that has exited and been reaped, and that
// no process uses at the time DeadPID returns (pids are reused: a caller
// that needs it unused for long should check again). It runs this test
// binary, which exits at once whatever its TestMain does.
func DeadPID(t testing.TB) int {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		cmd := exec.Command(self)
		cmd.Env = Env(exitEnv + "=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", self, err, out)
		}
		if pid := cmd.Process.Pid; unused(pid) {
			return pid
		}
	}
	t.Fatal("no pid of an exited process stays unused here")
	return 0
}

// KillOnCleanup kills the process pid (SIGKILL; TerminateProcess on
// Windows) when t ends, unless it is Gone by then: a failing test leaves no
// process behind. pid must not be that of a process this one started with
// os/exec (see Gone).
func KillOnCleanup(t testing.TB, pid int) {
	t.Cleanup(func() {
		if !Gone(pid) {
			kill(pid)
		}
	})
}

// AwaitPIDs waits at most timeout for the file at path to hold a whole line
// (one that ends in a newline) of positive pids separated by blanks, and
// returns them; it fails t if none comes. A line is whole once its newline
// is written, so a shell's "echo $$ > FILE" may write it in pieces.
func AwaitPIDs(t testing.TB, timeout time.Duration, path string) []int {
	t.Helper()
	var pids []int
	Await(t, timeout, "a line of pids in "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				return false
			}
			pids = append(pids, n)
		}
		return len(pids) > 0
	})
	return pids
}

// WriteAtomic writes b to path through a temporary file beside it and a
// rename, so that a reader sees either nothing or all of b.
func WriteAtomic(path string, b []byte) error {
	tmp := path + ".part"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// StatusJSON runs the gpuexec binary bin as "bin status --json --lock lock"
// in Env, and returns the JSON object it prints. It fails t unless bin exits
// 0 within timeout (it is then killed) and prints one JSON object.
func StatusJSON(t testing.TB, timeout time.Duration, bin, lock string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "status", "--json", "--lock", lock)
	cmd.Env = Env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%v did not exit within %s; killed it\nstderr:\n%s", cmd.Args, timeout, &stderr)
	case err != nil:
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", cmd.Args, err, &stdout, &stderr)
	}
	var m map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &m); err != nil {
		t.Fatalf("status --json printed %q: %v\nstderr:\n%s", &stdout, err, &stderr)
	}
	return m
}

// Stat is what ProcStat reads of a process.
type Stat struct {
	State byte   // as ps shows it: R, S, D, T (stopped), Z (zombie), X (dead)...
	PPID  int    // the parent's pid
	PGRP  int    // the process group
	Comm  string // the command name, as the kernel keeps it (15 bytes at most)
}

// AwaitChildPGID waits at most timeout for the lock record at lock to name
// pgid as its job's process group (childPgid, one of gpuexec's additions to
// the seed's record), and fails t if it does not. Until then a gpuexec
// killed outright leaves a record that does not cover its job's group.
func AwaitChildPGID(t testing.TB, timeout time.Duration, lock string, pgid int) {
	t.Helper()
	Await(t, timeout, fmt.Sprintf("the lock record to name the job's process group %d", pgid), func() bool {
		b, err := os.ReadFile(lock)
		var rec struct {
			ChildPGID int `json:"childPgid"`
		}
		return err == nil && json.Unmarshal(b, &rec) == nil && rec.ChildPGID == pgid
	})
}
