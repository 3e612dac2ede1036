//go:build linux

package torture

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// The size of the storms. CI runs the defaults; by hand, much larger.
var (
	flagSections   = flag.Int("torture.sections", 2000, "critical sections in the crash storm")
	flagContenders = flag.Int("torture.contenders", 16, "concurrent gpuexec contenders in the crash storm")
	flagKillPct    = flag.Float64("torture.kill-pct", 10, "percent of crash-storm sections SIGKILLed (half gpuexec, half its job)")
	flagIntPct     = flag.Float64("torture.int-pct", 5, "percent of crash-storm sections sent SIGINT")
	flagSeed       = flag.Uint64("torture.seed", 0, "random seed (0: from the clock; the seed is logged)")
	flagPoll       = flag.Duration("torture.poll", 0, "--poll of the storm's gpuexec processes (0: gpuexec's default, 20s)")
	flagMixed      = flag.Int("torture.mixed-sections", 240, "gpuexec sections in the storm mixed with the seed's Node tool")
	flagNodes      = flag.Int("torture.node-contenders", 4, "Node contenders in the mixed storm")
	flagProfile    = flag.Bool("torture.profile", false, "log where the crash storm's time goes")
	flagStrict     = flag.Bool("torture.strict", true, "fail on the files a SIGKILL can leave beside the lock, which the next holder sweeps (see isDebris); false only logs them")
)

// long bounds every wait for a single condition: generous, for a loaded
// two-core machine.
const long = 30 * time.Second

var (
	gpuexecBin string // gpuexec, built without -race
	jobBin     string // testdata/job, built without -race
)

// jobName is the job binary's name, which is also its /proc comm: orphans
// of killed gpuexec processes are recognised by it (see reapOrphans).
const jobName = "torture-job"

func TestMain(m *testing.M) {
	// Run as nvidia-smi (the fake, for the share storm), or as the share
	// storm's job.
	gputest.Main()
	if os.Getenv(shareJobEnv) != "" {
		os.Exit(shareJob())
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	// Every temporary file of these tests and of what they start is in
	// dir, removed once they have run (a job's TMPDIR among them).
	dir, err := testsupport.OwnTempDir("gpuexec-torture-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// Both without -race, whatever this test binary was built with: the
	// storms start thousands of them.
	var gxErr, jobErr error
	var wg sync.WaitGroup
	wg.Go(func() { gpuexecBin, gxErr = testsupport.Build(dir, "gpuexec", "github.com/gpuexec/gpuexec") })
	wg.Go(func() { jobBin, jobErr = testsupport.Build(dir, jobName, "./testdata/job") })
	wg.Wait()
	if err := errors.Join(gxErr, jobErr); err != nil {
		fmt.Fprintln(os.Stderr, "building:", err)
		return 1
	}
	// Orphans of a SIGKILLed gpuexec (its job's processes) are re-parented
	// to this process rather than to an init that may never reap them;
	// reapOrphans collects them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "PR_SET_CHILD_SUBREAPER:", err)
	}
	return m.Run()
}

// reapOrphans collects exited orphans re-parented to this process (the
// subreaper): processes of jobs whose gpuexec was SIGKILLed. It touches only
// zombies running jobBin, never a process an exec.Cmd here waits for.
func reapOrphans() { reapZombies(jobName) }

// reapZombies collects exited processes re-parented to this process whose
// command name is comm.
func reapZombies(comm string) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := testsupport.ProcStat(pid)
		if ok && st.State == 'Z' && st.PPID == self && st.Comm == comm {
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// gproc is a started gpuexec (or Node) process. Its stdout (the job's,
// inherited) and stderr (gpuexec's log) are read through pipes, so that
// processes of the job that outlive it never delay Wait.
type gproc struct {
	cmd    *exec.Cmd
	lines  chan string   // the job's stdout lines
	stderr *tail         // the log
	wait   chan struct{} // stderr showed "waiting for GPU lock"
	done   chan struct{} // closed once Wait returned
	eof    chan struct{} // closed once every writer of stdout is gone
	err    error         // Wait's, once done is closed
	began  time.Time
	ended  time.Time
}

// startG starts cmd with piped stdout and stderr.
func startG(cmd *exec.Cmd) (*gproc, error) {
	p := &gproc{
		cmd:    cmd,
		lines:  make(chan string, 256),
		stderr: &tail{max: 16 << 10},
		wait:   make(chan struct{}),
		done:   make(chan struct{}),
		eof:    make(chan struct{}),
	}
	or, ow, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	er, ew, err := os.Pipe()
	if err != nil {
		or.Close()
		ow.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = ow, ew
	p.began = time.Now()
	err = cmd.Start()
	ow.Close()
	ew.Close()
	if err != nil {
		or.Close()
		er.Close()
		return nil, err
	}
	go func() {
		defer close(p.eof)
		defer or.Close()
		sc := bufio.NewScanner(or)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default: // nobody reads this many; drop
			}
		}
	}()
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		defer er.Close()
		sc := bufio.NewScanner(er)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		waiting := false
		for sc.Scan() {
			l := sc.Text()
			fmt.Fprintln(p.stderr, l)
			if !waiting && strings.Contains(l, "waiting for GPU lock") {
				waiting = true
				close(p.wait)
			}
		}
	}()
	go func() {
		p.err = cmd.Wait()
		p.ended = time.Now()
		// gpuexec's own stderr ends with it, unless the job kept it
		// open: wait for it a little, for complete logs.
		select {
		case <-stderrDone:
		case <-time.After(time.Second):
		}
		close(p.done)
	}()
	return p, nil
}

// gx is gpuexec with args, under testsupport.Env.
func gx(args ...string) *exec.Cmd {
	cmd := exec.Command(gpuexecBin, args...)
	cmd.Env = testsupport.Env()
	return cmd
}

// shellStatus is the status a shell would report for the ended process:
// its exit code, or 128+N when signal N killed it.
func (p *gproc) shellStatus() int {
	st := p.cmd.ProcessState
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// killedBy reports whether the process died of sig.
func (p *gproc) killedBy(sig syscall.Signal) bool {
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

func (p *gproc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitExit waits at most timeout for the process to end; false if it did
// not (it is then killed).
func (p *gproc) waitExit(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		return false
	}
}

// startT starts cmd or fails the test, and kills it at the end of the test
// if it still runs.
func startT(t testing.TB, cmd *exec.Cmd) *gproc {
	t.Helper()
	p, err := startG(cmd)
	if err != nil {
		t.Fatalf("starting %v: %v", cmd.Args, err)
	}
	t.Cleanup(func() {
		if !p.exited() {
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// mustExit waits (at most long) for p to end, failing the test if it does
// not.
func mustExit(t testing.TB, p *gproc) {
	t.Helper()
	if !p.waitExit(long) {
		t.Fatalf("%v did not exit within %s; killed it\nstderr:\n%s", p.cmd.Args, long, p.stderr)
	}
}

// mustWait waits (at most long) for p to log that it waits for the lock,
// failing the test if it does not; who names p in the failure.
func (p *gproc) mustWait(t testing.TB, who string) {
	t.Helper()
	select {
	case <-p.wait:
	case <-time.After(long):
		t.Fatalf("%s does not say it waits\n%s", who, p.stderr)
	}
}

// nextLine returns the next stdout line with prefix, failing the test after
// timeout (lines without the prefix are skipped).
func nextLine(t testing.TB, p *gproc, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-p.lines:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("%v: no %q line within %s\nstderr:\n%s", p.cmd.Args, prefix, timeout, p.stderr)
		}
	}
}

// leftovers lists what is in the lock's folder besides the permanent
// guards and journal, sorted; a missing folder has none. The journal, if
// there, must hold only whole, valid lines: the storm's jobs wrote it at
// once, some of them killed.
func leftovers(t testing.TB, lockPath string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(lockPath))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		// The guards are permanent: the lock's, and its devices'.
		if n := e.Name(); n != filepath.Base(lockPath)+".guard" && n != filepath.Base(lockPath)+journal.Suffix &&
			!(strings.HasSuffix(n, ".guard") && deviceBase(lockPath, n) != "") {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	rd, err := journal.Load([]string{lockPath + journal.Suffix}, journal.Window{})
	switch {
	case err != nil:
		t.Errorf("the journal: %v", err)
	case rd.Lines() > 0 || rd.Truncated:
		t.Errorf("the journal beside the lock: %d line(s) set aside %v (truncated %v) among %d records", rd.Lines(), rd.SetAside, rd.Truncated, len(rd.Records))
	}
	return out
}

// readLines returns the lines of path; none if it does not exist.
func readLines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// lockDir returns a lock path in a folder of its own (not created yet)
// under t.TempDir(), and a scratch folder for the test's own files.
func lockDir(t testing.TB) (lock, work string) {
	root := t.TempDir()
	work = filepath.Join(root, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "locks", "gpu.lock"), work
}

// psTree describes the processes whose parent is this one or that run
// gpuexec or the job, for a failure message.
func psTree() string {
	out, err := exec.Command("ps", "-eo", "pid,ppid,pgid,stat,etime,args").Output()
	if err != nil {
		return fmt.Sprintf("(ps: %v)", err)
	}
	var b strings.Builder
	self := strconv.Itoa(os.Getpid())
	for i, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if i == 0 || (len(f) > 1 && f[1] == self) || strings.Contains(l, gpuexecBin) || strings.Contains(l, jobName) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
