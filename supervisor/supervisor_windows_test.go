//go:build windows

package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/windows"

	"github.com/gpuexec/gpuexec/internal/testsupport"
	"github.com/gpuexec/gpuexec/lock"
)

// The test binary doubles as the jobs these tests run: started with
// helperEnv set, TestHelperProcess plays that role and exits.
const (
	helperEnv  = "GPUEXEC_SUPERVISOR_HELPER" // the role; see helperRoles
	helperCode = "GPUEXEC_SUPERVISOR_CODE"   // exit: the exit code
	helperPIDs = "GPUEXEC_SUPERVISOR_PIDS"   // tree, leave, sleep: where pids go
	helperLock = "GPUEXEC_SUPERVISOR_LOCK"   // supervise: the lock path
)

// long bounds every wait for a condition.
const long = 20 * time.Second

var helperRoles = map[string]func() int{
	// exit: exit with $GPUEXEC_SUPERVISOR_CODE.
	"exit": func() int {
		code, err := strconv.ParseUint(os.Getenv(helperCode), 0, 32)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		windows.ExitProcess(uint32(code))
		return 2
	},
	// sleep: write "PID\n" to $GPUEXEC_SUPERVISOR_PIDS, then sleep.
	"sleep": func() int {
		if err := testsupport.WriteAtomic(os.Getenv(helperPIDs), fmt.Appendf(nil, "%d\n", os.Getpid())); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		time.Sleep(time.Hour)
		return 0
	},
	// tree: start a grandchild that sleeps, write "PID GRANDCHILD\n" to
	// $GPUEXEC_SUPERVISOR_PIDS, then wait for the grandchild.
	"tree": func() int {
		gc, err := startSleeper()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if err := testsupport.WriteAtomic(os.Getenv(helperPIDs), fmt.Appendf(nil, "%d %d\n", os.Getpid(), gc.Process.Pid)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		gc.Wait()
		return 0
	},
	// leave: start a grandchild that sleeps, write its pid to
	// $GPUEXEC_SUPERVISOR_PIDS and exit 0, leaving it behind.
	"leave": func() int {
		gc, err := startSleeper()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if err := testsupport.WriteAtomic(os.Getenv(helperPIDs), fmt.Appendf(nil, "%d\n", gc.Process.Pid)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		return 0
	},
	// injob: exit 0 if this process runs in a Job Object; 3 otherwise.
	"injob": func() int {
		if inJob() {
			return 0
		}
		return 3
	},
	// supervise: run Run on the tree role, under the lock at
	// $GPUEXEC_SUPERVISOR_LOCK, as gpuexec would.
	"supervise": func() int {
		cfg := Config{
			Lock:      lockOptions(os.Getenv(helperLock)),
			Wait:      long,
			Argv:      []string{os.Args[0], "-test.run=^TestHelperProcess$"},
			Env:       append(os.Environ(), helperEnv+"=tree"),
			KillAfter: time.Second,
			Logger:    hclog.New(&hclog.LoggerOptions{Output: os.Stderr}),
		}
		return Run(context.Background(), cfg)
	},
}

// inJob reports whether this process runs in a Job Object
// (IsProcessInJob, which x/sys does not wrap, with no job: any job).
func inJob() bool {
	var in int32
	r, _, _ := windows.NewLazySystemDLL("kernel32.dll").NewProc("IsProcessInJob").Call(
		uintptr(windows.CurrentProcess()), 0, uintptr(unsafe.Pointer(&in)))
	return r != 0 && in != 0
}

// TestHelperProcess is not a test: it is the body of the helper processes.
func TestHelperProcess(t *testing.T) {
	role := os.Getenv(helperEnv)
	if role == "" {
		t.Skip("not a test: the body of this package's helper processes")
	}
	fn, ok := helperRoles[role]
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown helper role", role)
		os.Exit(2)
	}
	os.Exit(fn())
}

// startSleeper starts the sleep role as a grandchild, its pid file beside
// $GPUEXEC_SUPERVISOR_PIDS, and waits (at most long) for it to run.
func startSleeper() (*exec.Cmd, error) {
	pidFile := os.Getenv(helperPIDs) + ".gc"
	gc, err := startHelper("sleep", helperPIDs+"="+pidFile)
	if err != nil {
		return nil, err
	}
	testsupport.Poll(long, func() bool {
		_, err := os.Stat(pidFile)
		return err == nil
	})
	return gc, nil
}

func startHelper(role string, env ...string) (*exec.Cmd, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+role), env...)
	return cmd, cmd.Start()
}

// lockOptions are fast options on the lock at path.
func lockOptions(path string) lock.Options {
	return lock.Options{Path: path, Owner: "test", Slug: "job", Poll: 5 * time.Millisecond}
}

// helperConfig is testConfig with the test binary as the job, in role.
func helperConfig(t *testing.T, role string, env ...string) (Config, *bytes.Buffer) {
	cfg, logs := testConfig(t, os.Args[0], "-test.run=^TestHelperProcess$")
	cfg.Env = append(append(os.Environ(), helperEnv+"="+role), env...)
	return cfg, logs
}

func TestExitStatusesWindows(t *testing.T) {
	tests := []struct {
		name    string
		code    uint32
		timeout time.Duration
		want    int
	}{
		{"success", 0, 0, 0},
		{"child's own code", 3, 0, 3},
		{"a code above 255 passes through", 70000, 0, 70000},
		{"NTSTATUS passes through", 0xC0000005, 0, 0xC0000005},
		{"ended by Ctrl+C or Ctrl+Break", statusControlCExit, 0, 130},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, logs := helperConfig(t, "exit", fmt.Sprintf("%s=%d", helperCode, tt.code))
			if code := Run(context.Background(), cfg); code != tt.want {
				t.Fatalf("Run = %d, want %d\n%s", code, tt.want, logs)
			}
			if _, err := os.Stat(cfg.Lock.Path); !os.IsNotExist(err) {
				t.Fatalf("lock left after Run: %v", err)
			}
		})
	}
}

// The child finds itself in a job when its code runs: it is created
// suspended, assigned, then resumed.
func TestChildRunsInsideItsJob(t *testing.T) {
	if inJob() {
		t.Skip("the test itself runs in a Job Object, which its children inherit: the child's own job cannot be told from it")
	}
	cfg, logs := helperConfig(t, "injob")
	if code := Run(context.Background(), cfg); code != 0 {
		t.Fatalf("Run = %d, want 0 (the child found itself in no job)\n%s", code, logs)
	}
}

// --timeout stops the child and everything it started, through the job
// (after a CTRL_BREAK_EVENT, which the grandchild does not get where the
// console cannot deliver it), with 124.
func TestTimeoutKillsTheTree(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	cfg, logs := helperConfig(t, "tree", helperPIDs+"="+pidFile)
	// Long enough for the whole tree to start (slow under Wine): the
	// tree's own hour-long sleep is what the timeout ends.
	cfg.Timeout = 10 * time.Second
	cfg.KillAfter = 200 * time.Millisecond
	done := make(chan int, 1)
	go func() { done <- Run(context.Background(), cfg) }()
	pids := testsupport.AwaitPIDs(t, long, pidFile)
	for _, pid := range pids {
		testsupport.KillOnCleanup(t, pid)
	}
	if code := <-done; code != ExitTimeout {
		t.Fatalf("Run = %d, want %d\n%s", code, ExitTimeout, logs)
	}
	for _, pid := range pids {
		testsupport.Await(t, long, fmt.Sprintf("pid %d of the job's tree to be gone", pid), func() bool { return testsupport.Gone(pid) })
	}
	if _, err := os.Stat(cfg.Lock.Path); !os.IsNotExist(err) {
		t.Fatalf("lock left after Run: %v", err)
	}
}

// A process the child leaves behind in the job is stopped before Run
// returns.
func TestLeftoversStoppedThroughTheJob(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	cfg, logs := helperConfig(t, "leave", helperPIDs+"="+pidFile)
	cfg.KillAfter = 200 * time.Millisecond
	if code := Run(context.Background(), cfg); code != 0 {
		t.Fatalf("Run = %d\n%s", code, logs)
	}
	pids := testsupport.AwaitPIDs(t, long, pidFile)
	testsupport.KillOnCleanup(t, pids[0])
	if !testsupport.Gone(pids[0]) {
		t.Fatalf("leftover %d still runs after Run returned\n%s", pids[0], logs)
	}
	if !strings.Contains(logs.String(), "left processes behind") {
		t.Fatalf("leftovers not logged:\n%s", logs)
	}
}

// When the supervising process dies without a word (TerminateProcess, as
// taskkill /F does), the job's handle is closed and Windows kills the whole
// tree (KILL_ON_JOB_CLOSE).
func TestKillOnJobClose(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pids")
	sup, err := startHelper("supervise", helperPIDs+"="+pidFile, helperLock+"="+filepath.Join(dir, "gpu.lock"))
	if err != nil {
		t.Fatal(err)
	}
	testsupport.KillOnCleanup(t, sup.Process.Pid)
	pids := testsupport.AwaitPIDs(t, long, pidFile)
	for _, pid := range pids {
		testsupport.KillOnCleanup(t, pid)
	}
	if err := sup.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	sup.Wait()
	for _, pid := range pids {
		testsupport.Await(t, long, fmt.Sprintf("pid %d of the job's tree to die with its supervisor", pid), func() bool { return testsupport.Gone(pid) })
	}
}

// A forwarded signal becomes CTRL_BREAK_EVENT to the child's process
// group; a child that does not handle it ends with STATUS_CONTROL_C_EXIT,
// reported as 130.
func TestSignalBecomesCtrlBreak(t *testing.T) {
	requireCtrlBreak(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	cfg, logs := helperConfig(t, "sleep", helperPIDs+"="+pidFile)
	cfg.KillAfter = 10 * time.Second
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	done := make(chan int, 1)
	go func() { done <- Run(context.Background(), cfg) }()
	testsupport.KillOnCleanup(t, testsupport.AwaitPIDs(t, long, pidFile)[0])
	sigs <- syscall.SIGTERM
	if code := <-done; code != 130 {
		t.Fatalf("Run = %d, want 130\n%s", code, logs)
	}
}

// requireCtrlBreak skips the test where this console cannot deliver
// CTRL_BREAK_EVENT to a process group, naming the Wine limitation; outside
// Wine it must work.
func requireCtrlBreak(t *testing.T) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "probe")
	probe := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	probe.Env = append(os.Environ(), helperEnv+"=sleep", helperPIDs+"="+pidFile)
	err := testsupport.ProbeCtrlBreak(t, long, probe, pidFile)
	if err == nil {
		return
	}
	if v := testsupport.WineVersion(); v != "" {
		t.Skipf("Wine %s cannot deliver CTRL_BREAK_EVENT (GenerateConsoleCtrlEvent: %v): wineserver implements only CTRL_C_EVENT (which a new process group ignores), and processes wine starts outside a terminal have no console", v, err)
	}
	t.Fatalf("GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, %d): %v", probe.Process.Pid, err)
}
