package testsupport

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/proc"
)

// exitEnv, set to 1, makes a binary that links this package exit 0 as it
// starts, before its TestMain: DeadPID's child.
const exitEnv = "GPUEXEC_TESTSUPPORT_EXIT"

func init() {
	if os.Getenv(exitEnv) == "1" {
		os.Exit(0)
	}
}

// DeadPID is the pid of a process that has exited and been reaped, and that
// no process uses at the time DeadPID returns. On Windows no process gets it
// until t ends (a handle to the exited process is kept open: Windows and
// Wine give a pid out again at once, the lowest free first). Elsewhere pids
// are reused in turn, so a caller that needs it unused for long should
// check again. It runs this test
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
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("%s: %v", self, err)
		}
		release := reserve(cmd.Process.Pid)
		if err := cmd.Wait(); err != nil {
			release()
			t.Fatalf("%s: %v\n%s", self, err, out.Bytes())
		}
		if pid := cmd.Process.Pid; unused(pid) {
			t.Cleanup(release)
			return pid
		}
		release()
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

// Stat is what /proc/PID/stat says of a process (see ProcStat).
type Stat = proc.Stat
