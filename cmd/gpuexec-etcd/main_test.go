//go:build unix

package main

// Black-box tests of gpuexec with an etcd:// lock: TestMain builds gpuexec
// and this helper side by side (gpuexec finds the helper beside itself) and
// starts an etcd on loopback; every test runs gpuexec as a user would. The
// test binary doubles as the job (see roles). Without the etcd binary the
// tests skip, except under CI.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuexec/gpuexec/internal/etcdtest"
	"github.com/gpuexec/gpuexec/internal/testlog"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

const (
	roleEnv  = "GPUEXEC_ETCD_TEST_ROLE"
	readyEnv = "GPUEXEC_ETCD_TEST_READY" // hold: where to write "pid\n" once running
	workEnv  = "GPUEXEC_ETCD_TEST_WORK"  // critical, hold: the folder of its evidence (the truth file)
	nameEnv  = "GPUEXEC_ETCD_TEST_NAME"  // critical: its name in its evidence (else its pid)
)

// long bounds every wait; generous for a loaded two-core machine.
const long = 30 * time.Second

var (
	gpuexecBin string
	jobBin     string
	shared     *etcdtest.Server
	buildErr   error
)

// roles are what the test binary does as a job under gpuexec.
var roles = map[string]func() int{
	// hold: write our pid and GPUEXEC_LOCK to $READY, then run until
	// stdin reaches EOF (or forever, with stdin closed... the test keeps
	// it open). With $WORK, it first takes the truth file's lock (see
	// critical), and fails loudly (an "overlap" file, status 3) if it
	// cannot: it holds the truth while it runs.
	"hold": func() int {
		if dir := os.Getenv(workEnv); dir != "" {
			f, err := os.OpenFile(filepath.Join(dir, "truth"), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			defer f.Close()
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
				os.WriteFile(filepath.Join(dir, fmt.Sprintf("overlap-%d", os.Getpid())), nil, 0o644)
				fmt.Fprintln(os.Stderr, "hold: another job holds the truth file")
				return 3
			}
		}
		s := fmt.Sprintf("%d %s %s\n", os.Getpid(), os.Getenv("GPUEXEC_LOCK_HELD"), os.Getenv("GPUEXEC_LOCK_PATH"))
		if err := writeAtomic(os.Getenv(readyEnv), s); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		io.Copy(io.Discard, os.Stdin)
		return 0
	},
	// critical: prove it runs alone (a non-blocking flock on a file in
	// $WORK; failing, it writes an "overlap" file), then count itself: a
	// "ran-NAME" file ($NAME, else its pid) holding when it started and
	// ended (Unix nanoseconds).
	"critical": func() int {
		began := time.Now()
		dir := os.Getenv(workEnv)
		f, err := os.OpenFile(filepath.Join(dir, "truth"), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("overlap-%d", os.Getpid())), nil, 0o644)
		} else {
			defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
		}
		time.Sleep(3 * time.Millisecond) // the job's work, under the lock
		name := os.Getenv(nameEnv)
		if name == "" {
			name = strconv.Itoa(os.Getpid())
		}
		os.WriteFile(filepath.Join(dir, "ran-"+name), fmt.Appendf(nil, "%d %d", began.UnixNano(), time.Now().UnixNano()), 0o644)
		return 0
	},
}

func writeAtomic(path, s string) error { return testsupport.WriteAtomic(path, []byte(s)) }

func TestMain(m *testing.M) {
	if r := os.Getenv(roleEnv); r != "" {
		os.Exit(roles[r]())
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	// Every temporary file of these tests and of what they start is in
	// dir, removed once they have run (a job's TMPDIR among them).
	dir, err := testsupport.OwnTempDir("gpuexec-etcd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if bin := etcdtest.Find(); bin != "" {
		if gpuexecBin, err = testsupport.Build(dir, "gpuexec", "github.com/gpuexec/gpuexec"); err == nil {
			_, err = testsupport.Build(dir, "gpuexec-etcd", ".")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if shared, err = etcdtest.StartIn(bin, filepath.Join(dir, "etcd")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if jobBin, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if shared != nil {
		shared.Kill()
	}
	return code
}

func sharedEtcd(t *testing.T) *etcdtest.Server {
	t.Helper()
	etcdtest.Binary(t)
	if shared == nil {
		t.Fatal("no shared etcd")
	}
	return shared
}

// env is the environment of a gpuexec under test, with extra. Its
// --kill-after is 500ms, under a third of the shortest ttl here (3s), as
// gpuexec requires of an etcd lock; a test's --kill-after or extra wins.
func env(extra ...string) []string {
	return testsupport.Env(append([]string{"GPUEXEC_KILL_AFTER=500ms"}, extra...)...)
}

// proc is a started gpuexec whose output goes to buffers.
type proc struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	out, err *testlog.Buffer
	done     chan struct{}
	endedAt  time.Time // when it exited, once done is closed
}

func start(t *testing.T, environ []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(gpuexecBin, args...), out: &testlog.Buffer{}, err: &testlog.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = environ
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.err
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); p.endedAt = time.Now(); close(p.done) }()
	t.Cleanup(func() {
		p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(long):
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait is the exit status (at most long).
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(long):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%v did not exit within %s\nstderr:\n%s", p.cmd.Args, long, p.err)
	}
	return p.cmd.ProcessState.ExitCode()
}

func run(t *testing.T, environ []string, args ...string) (int, string, string) {
	t.Helper()
	p := start(t, environ, args...)
	p.stdin.Close()
	code := p.wait(t)
	return code, p.out.String(), p.err.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testsupport.Await(t, long, what, cond)
}

// holdJob starts gpuexec running the hold role under url and waits until
// the job runs; it returns gpuexec and the job's "pid held lock" line.
func holdJob(t *testing.T, url string, extra ...string) (*proc, []string) {
	t.Helper()
	return holdJobIn(t, url, nil, extra...)
}

// holdJobIn is holdJob with environ appended to the job's environment.
func holdJobIn(t *testing.T, url string, environ []string, extra ...string) (*proc, []string) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	args := append([]string{"--lock", url, "--owner", "channels", "--slug", "ep12"}, extra...)
	p := start(t, env(append([]string{roleEnv + "=hold", readyEnv + "=" + ready}, environ...)...), append(args, "--", jobBin)...)
	var fields []string
	waitFor(t, "the job to run", func() bool {
		b, err := os.ReadFile(ready)
		fields = strings.Fields(string(b))
		if p.exited() {
			t.Fatalf("gpuexec exited: %d\n%s", p.cmd.ProcessState.ExitCode(), p.err)
		}
		return err == nil && len(fields) == 3
	})
	return p, fields
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func statusJSON(t *testing.T, url string) map[string]any {
	t.Helper()
	return testsupport.StatusJSON(t, long, gpuexecBin, url)
}

func queueLen(t *testing.T, url string) int {
	q, _ := statusJSON(t, url)["queue"].([]any)
	return len(q)
}

// A job runs under an etcd lock with GPUEXEC_LOCK set to the URL; while it
// runs, status and clear see its holder, --wait 0 defers (75), a waiter
// logs the holder and its position and gives up at --wait (75).
func TestJobUnderEtcdLock(t *testing.T) {
	srv := sharedEtcd(t)
	url := srv.URL("gpuexec-e2e/job", "ttl=10s")
	p, job := holdJob(t, url)
	if job[1] != "1" || job[2] != url {
		t.Errorf("job sees GPUEXEC_LOCK_HELD=%s GPUEXEC_LOCK=%s, want 1 and %s", job[1], job[2], url)
	}

	m := statusJSON(t, url)
	if m["state"] != "held" || m["owner"] != "channels" || m["slug"] != "ep12" || m["alive"] != true ||
		m["pid"] != float64(p.cmd.Process.Pid) {
		t.Errorf("status --json while held: %v (gpuexec pid %d)", m, p.cmd.Process.Pid)
	}
	// The job's group reaches the record once the job has run
	// supervisor's recordChildAfter (100 ms), not at its start.
	waitFor(t, "status to name the job's group", func() bool {
		m = statusJSON(t, url)
		return m["childPgid"] == float64(mustAtoi(t, job[0]))
	})
	code, out, _ := run(t, env(), "status", "--lock", url)
	if code != 0 || !strings.HasPrefix(out, fmt.Sprintf("held by channels/ep12 (pid %d) since ", p.cmd.Process.Pid)) || !strings.Contains(out, "alive") {
		t.Errorf("status: %d %q", code, out)
	}

	code, _, errOut := run(t, env(), "--lock", url, "--wait", "0", "--", "true")
	if code != 75 || !strings.Contains(errOut, "held by channels/ep12") {
		t.Errorf("--wait 0: %d\n%s", code, errOut)
	}
	code, _, errOut = run(t, env(), "--lock", url, "--wait", "3s", "--report", "300ms", "--", "true")
	re := regexp.MustCompile(`waiting for GPU lock: held by channels/ep12 \(pid \d+\) for \d+[sm]; position 1 of 1; waited \d+s`)
	if code != 75 || len(re.FindAllString(errOut, -1)) < 2 || !strings.Contains(errOut, "gave up waiting") {
		t.Errorf("--wait 2s: %d\n%s", code, errOut)
	}
	code, _, errOut = run(t, env(), "clear", "--lock", url)
	if code != 1 || !strings.Contains(errOut, "not cleared: held by channels/ep12") {
		t.Errorf("clear of a live holder: %d\n%s", code, errOut)
	}

	p.stdin.Close() // the job ends
	if code := p.wait(t); code != 0 {
		t.Fatalf("gpuexec: %d\n%s", code, p.err)
	}
	for _, want := range []string{"acquired GPU lock", "job started", "job exited", "releasing GPU lock"} {
		if !strings.Contains(p.err.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, p.err)
		}
	}
	if code, out, _ := run(t, env(), "status", "--lock", url); code != 0 || out != "free\nlock: "+url+"\n" {
		t.Errorf("status after: %d %q", code, out)
	}
	if code, out, _ := run(t, env(), "clear", "--lock", url); code != 0 || !strings.HasPrefix(out, "free") {
		t.Errorf("clear of a free lock: %d %q", code, out)
	}
}

func mustAtoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// gpuexec processes contending for one etcd lock run their jobs one at a
// time, and all of them run.
func TestContentionZeroOverlaps(t *testing.T) {
	srv := sharedEtcd(t)
	url := srv.URL("gpuexec-e2e/contention", "")
	work := t.TempDir()
	const procs, rounds = 4, 3
	var wg sync.WaitGroup
	errs := make(chan string, procs*rounds)
	for i := range procs {
		wg.Go(func() {
			for r := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 2*long)
				cmd := exec.CommandContext(ctx, gpuexecBin, "--lock", url, "--wait", "1m", "--slug", fmt.Sprintf("p%d-r%d", i, r), "--", jobBin)
				cmd.Env = env(roleEnv+"=critical", workEnv+"="+work)
				out, err := cmd.CombinedOutput()
				cancel()
				if err != nil {
					errs <- fmt.Sprintf("process %d round %d: %v\n%s", i, r, err, out)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	overlaps, _ := filepath.Glob(filepath.Join(work, "overlap-*"))
	ran, _ := filepath.Glob(filepath.Join(work, "ran-*"))
	if len(overlaps) != 0 || len(ran) != procs*rounds {
		t.Errorf("%d overlapping jobs, %d of %d jobs ran", len(overlaps), len(ran), procs*rounds)
	}
	if m := statusJSON(t, url); m["state"] != "free" {
		t.Errorf("left behind: %v", m)
	}
}

// An etcd that cannot be reached at the start fails at once with 125 (after
// the URL's dial-timeout); it is not a wait.
func TestUnreachableEtcdIs125(t *testing.T) {
	sharedEtcd(t)
	url := "etcd://127.0.0.1:1/gpuexec-e2e/x?dial-timeout=500ms"
	start := time.Now()
	code, _, errOut := run(t, env(), "--lock", url, "--wait", "1m", "--", "true")
	if code != 125 || !strings.Contains(errOut, "did not answer within 500ms") {
		t.Errorf("run: %d\n%s", code, errOut)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
	if code, _, errOut := run(t, env(), "status", "--lock", url); code != 125 || !strings.Contains(errOut, "did not answer") {
		t.Errorf("status: %d\n%s", code, errOut)
	}
}

// Refused at once with 125: a bad URL, --gpus with an etcd lock, a
// missing helper.
func TestOwnFailuresAre125(t *testing.T) {
	srv := sharedEtcd(t)
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--lock", "etcd://127.0.0.1:2379/", "--", "true"}, "no key"},
		{nil, []string{"--lock", "etcd://u:p@127.0.0.1:2379/k", "--", "true"}, "credentials in the URL"},
		{nil, []string{"--lock", srv.URL("k", "ttl=1s"), "--", "true"}, "at least 2s"},
		{nil, []string{"--lock", srv.URL("k", ""), "--gpus", "0,1", "--", "true"}, "--gpus needs a lock file"},
		{[]string{"GPUEXEC_ETCD_AGENT=/nonexistent/gpuexec-etcd"}, []string{"--lock", srv.URL("k", ""), "--", "true"}, "/nonexistent/gpuexec-etcd"},
		{nil, []string{"status", "--lock", "etcd://h:1/k?bogus=1"}, "unknown parameter"},
	} {
		code, _, errOut := run(t, env(c.env...), c.args...)
		if code != 125 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: %d, want 125 and %q\n%s", c.args, code, c.want, errOut)
		}
	}
}

// Jobs hand an etcd lock on through one --log file, the first taking it
// without waiting (--wait 0): each job logs one acquired line and, after
// it, one releasing line, and each holder's releasing line comes before
// the next holder's acquired line in the file.
func TestHandoffLogReadsInOrder(t *testing.T) {
	srv := sharedEtcd(t)
	url := srv.URL("gpuexec-e2e/handoff-log", "")
	logFile := filepath.Join(t.TempDir(), "gpuexec.log")
	logArgs := []string{"--lock", url, "--log", logFile, "--log-format", "json"}
	first, _ := holdJob(t, url, append(logArgs, "--wait", "0")...)
	jobs := []*proc{first}
	for i := 1; i <= 2; i++ {
		jobs = append(jobs, start(t, env(), append(logArgs, "--wait", "1m", "--", "true")...))
		waitFor(t, "the next job queued", func() bool { return queueLen(t, url) == i })
	}
	first.stdin.Close()
	for _, p := range jobs {
		if code := p.wait(t); code != 0 {
			t.Fatalf("gpuexec: %d\n%s", code, p.err)
		}
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, fmt.Sprintf("%v %v", m["gpuexec-pid"], m["@message"]))
	}
	// at is where job p's line msg is: -1 for none, -2 for more than one.
	at := func(p *proc, msg string) int {
		n := -1
		for i, l := range lines {
			if l == fmt.Sprintf("%d %s", p.cmd.Process.Pid, msg) {
				if n != -1 {
					return -2
				}
				n = i
			}
		}
		return n
	}
	for i, p := range jobs {
		acq, rel := at(p, "acquired GPU lock"), at(p, "releasing GPU lock")
		if acq < 0 || rel < acq {
			t.Errorf("job %d: acquired line at %d, releasing line at %d (-1: none, -2: more than one); want one of each, in that order", i, acq, rel)
		}
		if i > 0 {
			if prev := at(jobs[i-1], "releasing GPU lock"); prev < 0 || prev > acq {
				t.Errorf("job %d's releasing line (at %d) is not before job %d's acquired line (at %d)", i-1, prev, i, acq)
			}
		}
	}
	if t.Failed() {
		t.Logf("the log:\n%s", strings.Join(lines, "\n"))
	}
}

// gpuexec killed with SIGKILL: its job dies with it (Linux: parent-death
// signal), the helper sees gpuexec gone and releases the lock, and the next
// job starts well before the lease's TTL.
func TestKilledGpuexecHandsOver(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("relies on the job dying with gpuexec (Linux's parent-death signal)")
	}
	srv := sharedEtcd(t)
	url := srv.URL("gpuexec-e2e/killed", "ttl=60s")
	p, _ := holdJob(t, url)
	next := start(t, env(), "--lock", url, "--wait", "1m", "--", "true")
	waitFor(t, "the next job queued", func() bool { return queueLen(t, url) == 1 })
	killed := time.Now()
	p.cmd.Process.Kill()
	if code := next.wait(t); code != 0 {
		t.Fatalf("next job: %d\n%s", code, next.err)
	}
	if d := time.Since(killed); d > 20*time.Second {
		t.Errorf("next job ran %s after the holder was killed; the TTL (60s) did it, not the helper", d)
	} else {
		t.Logf("next job ran %s after SIGKILL of the holder (ttl=60s)", d.Round(time.Millisecond))
	}
}

// SIGINT while waiting: 130, and the waiter's place is gone.
func TestInterruptWhileWaiting(t *testing.T) {
	srv := sharedEtcd(t)
	url := srv.URL("gpuexec-e2e/interrupt", "")
	holder, _ := holdJob(t, url)
	w := start(t, env(), "--lock", url, "--wait", "1m", "--", "true")
	waitFor(t, "the waiter queued", func() bool { return queueLen(t, url) == 1 })
	w.cmd.Process.Signal(syscall.SIGINT)
	if code := w.wait(t); code != 130 {
		t.Errorf("waiter: %d, want 130\n%s", code, w.err)
	}
	if n := queueLen(t, url); n != 0 {
		t.Errorf("%d waiters left in the queue", n)
	}
	holder.stdin.Close()
	holder.wait(t)
}

// etcd lost while the job runs: by default gpuexec stops the job and exits
// 125 before the lease can expire; with --on-lost continue the job finishes.
func TestLosingEtcdStopsTheJob(t *testing.T) {
	srv := etcdtest.Start(t)
	url := srv.URL("gpuexec-e2e/lost", "ttl=3s&dial-timeout=1s")
	p, _ := holdJob(t, url, "--kill-after", "900ms") // under ttl/3
	gone := time.Now()
	srv.Kill()
	code := p.wait(t)
	if code != 125 || !strings.Contains(p.err.String(), "[ERROR] gpuexec.lock: GPU lock lost") ||
		!strings.Contains(p.err.String(), "stopping the job so that two jobs never share the GPU") {
		t.Errorf("gpuexec: %d, want 125 and the loss logged at ERROR\n%s", code, p.err)
	}
	t.Logf("job stopped %s after etcd died (ttl=3s)", time.Since(gone).Round(time.Millisecond))

	srv.Restart(t)
	// A key of its own: the first holder's lease outlived the restart.
	p, _ = holdJob(t, srv.URL("gpuexec-e2e/lost-continue", "ttl=3s&dial-timeout=1s"), "--on-lost", "continue")
	srv.Kill()
	waitFor(t, "the loss logged", func() bool { return strings.Contains(p.err.String(), "letting it finish (--on-lost continue)") })
	if p.exited() {
		t.Fatalf("gpuexec exited with --on-lost continue:\n%s", p.err)
	}
	p.stdin.Close()
	if code := p.wait(t); code != 0 {
		t.Errorf("--on-lost continue: %d, want the job's 0\n%s", code, p.err)
	}
}
