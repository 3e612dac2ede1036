//go:build windows

package cli

// Black-box tests of gpuexec.exe's Windows behaviour: the Job Object, the
// console control events, the exit statuses and the default lock path.
// Under Wine they run as .ci/wine runs them (see winetest/); where Wine
// cannot do what a test needs, the test says so and skips.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/windows"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

func init() {
	// sleep: write "PID\n" to $GPUEXEC_TEST_OUT, then sleep.
	helperRoles["sleep"] = func(args []string) int {
		if err := testsupport.WriteAtomic(os.Getenv(outEnv), fmt.Appendf(nil, "%d\n", os.Getpid())); err != nil {
			fmt.Fprintln(os.Stderr, "helper sleep:", err)
			return 2
		}
		time.Sleep(time.Hour)
		return 0
	}
	// tree: start a grandchild (the sleep role), write "PID GRANDCHILD\n"
	// to $GPUEXEC_TEST_OUT, and wait for the grandchild.
	helperRoles["tree"] = func(args []string) int {
		out := os.Getenv(outEnv)
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper tree:", err)
			return 2
		}
		gc := exec.Command(self)
		gc.Env = append(os.Environ(), role("sleep"), outEnv+"="+out+".gc")
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "helper tree:", err)
			return 2
		}
		testsupport.Poll(long, func() bool {
			_, err := os.Stat(out + ".gc")
			return err == nil
		})
		if err := testsupport.WriteAtomic(out, fmt.Appendf(nil, "%d %d\n", os.Getpid(), gc.Process.Pid)); err != nil {
			fmt.Fprintln(os.Stderr, "helper tree:", err)
			return 2
		}
		gc.Wait()
		return 0
	}
	// exitcode N: exit with N, which may be above 255 (ExitProcess).
	helperRoles["exitcode"] = func(args []string) int {
		code, err := strconv.ParseUint(args[0], 0, 32)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper exitcode:", err)
			return 2
		}
		windows.ExitProcess(uint32(code))
		return 2
	}
}

// startTreeJob starts gpuexec [args] -- <the tree role> and returns it once
// the job wrote its pid and its grandchild's.
func startTreeJob(t *testing.T, args ...string) (p *proc, child, grandchild int) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pids")
	args = append(args, "--", helperBin)
	p = startProc(t, gpuexecCmd([]string{role("tree"), outEnv + "=" + out}, args...))
	pids := testsupport.AwaitPIDs(t, long, out)
	if len(pids) != 2 {
		t.Fatalf("tree job wrote %v, want two pids", pids)
	}
	for _, pid := range pids {
		testsupport.KillOnCleanup(t, pid)
	}
	return p, pids[0], pids[1]
}

func wantGone(t *testing.T, what string, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		testsupport.Await(t, long, fmt.Sprintf("%s (pid %d) to be gone", what, pid), func() bool { return testsupport.Gone(pid) })
	}
}

func TestExitStatusWindows(t *testing.T) {
	t.Parallel()
	testExitCases(t, []exitCase{
		{name: "a code above 255", want: 70000, env: []string{role("exitcode")}, args: func(t *testing.T, lock string) []string {
			return []string{"--lock", lock, "--", helperBin, "70000"}
		}},
		{name: "ended by Ctrl+C or Ctrl+Break", want: 130, env: []string{role("exitcode")}, args: func(t *testing.T, lock string) []string {
			return []string{"--lock", lock, "--", helperBin, "0xC000013A"}
		}},
		// LookPath takes a file with an extension for a program;
		// CreateProcess then refuses it (ERROR_BAD_EXE_FORMAT).
		{name: "a file that is not a program", want: 126, stderr: "could not start the job", args: func(t *testing.T, lock string) []string {
			file := filepath.Join(t.TempDir(), "job.txt")
			if err := os.WriteFile(file, []byte("not a program"), 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{"--lock", lock, "--", file}
		}},
		{name: "a folder", want: 126, stderr: "not executable", args: func(t *testing.T, lock string) []string {
			return []string{"--lock", lock, "--", t.TempDir()}
		}},
		{name: "a missing program", want: 127, stderr: "not found", args: func(t *testing.T, lock string) []string {
			return []string{"--lock", lock, "--", filepath.Join(t.TempDir(), "missing.exe")}
		}},
	})
}

// --timeout ends the whole tree through the Job Object, with 124.
func TestTimeoutEndsTheJobTree(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	// The timeout must outlast the start of the whole tree (two test
	// binaries, slow under Wine): it is the tree's own hour-long sleep
	// that the timeout ends.
	p, child, grandchild := startTreeJob(t, "--lock", lock, "--timeout", "10s", "--kill-after", "300ms")
	r := p.wait(t)
	wantCode(t, r, 124)
	wantGone(t, "the job's process tree", child, grandchild)
	if !strings.Contains(r.stderr, "--timeout") {
		t.Errorf("stderr does not log the timeout:\n%s", r.stderr)
	}
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

// --signal KILL at --timeout terminates the Job Object at once, not after
// --kill-after: 124, the whole tree gone. (Other signals are Ctrl+Break.)
func TestTimeoutSignalKillWindows(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	p, child, grandchild := startTreeJob(t, "--lock", lock, "--timeout", "10s", "--signal", "KILL", "--kill-after", "60s")
	r := p.wait(t)
	wantCode(t, r, 124)
	if strings.Contains(r.stderr, "grace period") {
		t.Errorf("the job was killed after the grace period, not at once:\n%s", r.stderr)
	}
	wantGone(t, "the job's process tree", child, grandchild)
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

// When gpuexec is killed outright (taskkill /F, TerminateProcess), Windows
// closes its Job Object handle and kills the job's whole tree
// (KILL_ON_JOB_CLOSE); the lock it could not release is cleared by the
// next job as its pid is gone.
func TestKilledGpuexecTakesItsJobTreeAlong(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	p, child, grandchild := startTreeJob(t, "--lock", lock, "--owner", "killed", "--slug", "job")
	testsupport.AwaitChildPGID(t, long, lock, child)
	gpid := p.pid()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	wantGone(t, "the job's process tree", child, grandchild)
	// The liveness lock goes with the last handle to it, which Windows
	// closes as it ends the processes: wait for it.
	var m map[string]any
	testsupport.Await(t, long, "status to say stale", func() bool {
		m = testsupport.StatusJSON(t, long, gpuexecBin, lock)
		return m["state"] == "stale"
	})
	r := gx(t, []string{role("exit")}, "--lock", lock, "--wait", "5s", "--poll", "10ms", "--", helperBin, "0")
	wantCode(t, r, 0)
	if !strings.Contains(r.stderr, "cleared stale GPU lock") || !strings.Contains(r.stderr, fmt.Sprintf("pid %d is gone", gpid)) {
		t.Errorf("stderr does not log clearing the lock as pid %d is gone:\n%s", gpid, r.stderr)
	}
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

// Without --lock the lock is %TEMP%\gpuexec\gpu.lock.
func TestDefaultLockIsUnderTEMP(t *testing.T) {
	t.Parallel()
	temp := t.TempDir()
	// Made, as a job makes it: status reads a missing folder as no lock.
	if err := os.Mkdir(filepath.Join(temp, "gpuexec"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := gx(t, []string{"TEMP=" + temp}, "status", "--json")
	wantCode(t, r, 0)
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("status --json printed %q: %v", r.stdout, err)
	}
	if want := filepath.Join(temp, "gpuexec", "gpu.lock"); m["path"] != want {
		t.Fatalf("default lock %v, want %s", m["path"], want)
	}
}

// pressCtrlC sends CTRL_C_EVENT to this console's processes, as a Ctrl+C
// typed in it does; this test process takes its own copy on a channel.
// Processes started in a new process group ignore it, as on Windows.
func pressCtrlC(t *testing.T) {
	t.Helper()
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt)
	defer signal.Stop(c)
	if err := windows.GenerateConsoleCtrlEvent(windows.CTRL_C_EVENT, 0); err != nil {
		if v := testsupport.WineVersion(); v != "" {
			t.Skipf("Wine %s cannot send CTRL_C_EVENT to this console: %v", v, err)
		}
		t.Fatalf("GenerateConsoleCtrlEvent(CTRL_C_EVENT, 0): %v", err)
	}
	select {
	case <-c:
	case <-time.After(long):
		t.Fatal("the test's own Ctrl+C did not arrive")
	}
}

// ctrlBreakWorks reports whether this console delivers CTRL_BREAK_EVENT to
// a process group, probing a helper started in a group of its own.
func ctrlBreakWorks(t *testing.T) bool {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pid")
	probe := exec.Command(helperBin)
	probe.Env = testsupport.Env(role("sleep"), outEnv+"="+out)
	return testsupport.ProbeCtrlBreak(t, long, probe, out) == nil
}

// Ctrl+C in gpuexec's console while it waits for the lock: exit 130, the
// holder's lock untouched, nothing left behind. Not parallel: the Ctrl+C
// reaches every process of this console's process group.
func TestCtrlCWhileWaitingWindows(t *testing.T) {
	testsupport.EnsureConsole(t)
	_, lock := lockIn(t)
	// The holder runs in a process group of its own, which ignores Ctrl+C.
	holderPID := filepath.Join(t.TempDir(), "pid")
	hcmd := gpuexecCmd([]string{role("sleep"), outEnv + "=" + holderPID},
		"--lock", lock, "--owner", holderOwner, "--slug", holderSlug, "--", helperBin)
	hcmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: windows.CREATE_NEW_PROCESS_GROUP}
	h := startProc(t, hcmd)
	testsupport.KillOnCleanup(t, testsupport.AwaitPIDs(t, long, holderPID)[0])
	before := readRecord(t, lock)

	w := startProc(t, gpuexecCmd(nil, "--lock", lock, "--wait", "10m", "--poll", "10ms", "--", helperBin))
	testsupport.Await(t, long, "the waiter to log that it waits", func() bool {
		return strings.Contains(w.stderr(), "waiting for GPU lock")
	})
	pressCtrlC(t)
	r := w.wait(t)
	wantCode(t, r, 130)
	if strings.Contains(r.stderr, "job started") {
		t.Errorf("the job ran:\n%s", r.stderr)
	}
	if after := readRecord(t, lock); after.Token != before.Token || after.PID != h.pid() {
		t.Fatalf("the holder's lock changed: %+v, was %+v", after, before)
	}
	h.cmd.Process.Kill()
	h.wait(t)
}

// Ctrl+C in gpuexec's console while its job runs: gpuexec sends the job's
// process group CTRL_BREAK_EVENT and, if the job still runs --kill-after
// later, terminates the Job Object. Where the console cannot deliver
// CTRL_BREAK_EVENT (Wine), only the second half happens: exit 137.
func TestCtrlCWhileRunningWindows(t *testing.T) {
	testsupport.EnsureConsole(t)
	graceful := ctrlBreakWorks(t)
	dir, lock := lockIn(t)
	p, child, grandchild := startTreeJob(t, "--lock", lock, "--kill-after", "500ms")
	pressCtrlC(t)
	r := p.wait(t)
	want := 130
	if !graceful {
		want = 137
		if v := testsupport.WineVersion(); v != "" {
			t.Logf("Wine %s cannot deliver CTRL_BREAK_EVENT: checking the kill after --kill-after alone", v)
		}
	}
	wantCode(t, r, want)
	if !strings.Contains(r.stderr, "forwarding signal") {
		t.Errorf("stderr does not log forwarding the Ctrl+C:\n%s", r.stderr)
	}
	wantGone(t, "the job's process tree", child, grandchild)
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}
