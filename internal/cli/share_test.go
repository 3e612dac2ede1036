package cli

// Black-box tests of --share against the fake nvidia-smi: sharers run side
// by side while their budgets fit, a whole-card job at the head of the
// queue is served before later sharers, a killed sharer's budget is freed
// by the kernel's locks, and budgets are checked against the driver.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

func init() {
	// sharehold: write $GPUEXEC_VRAM_MIB to $GPUEXEC_TEST_OUT, the pid to
	// $GPUEXEC_TEST_READY, then run until stdin reaches EOF.
	helperRoles["sharehold"] = func([]string) int {
		if out := os.Getenv(outEnv); out != "" {
			testsupport.WriteAtomic(out, []byte(os.Getenv("GPUEXEC_VRAM_MIB")))
		}
		if err := testsupport.WriteAtomic(os.Getenv(readyEnv), []byte(strconv.Itoa(os.Getpid()))); err != nil {
			fmt.Fprintln(os.Stderr, "helper sharehold:", err)
			return 2
		}
		io.Copy(io.Discard, os.Stdin)
		return 0
	}
}

// sharedJob is a gpuexec running a sharehold job, ended by closing stdin.
type sharedJob struct {
	*proc
	ready, out string
	stdin      io.WriteCloser
}

func startShared(t *testing.T, c *card, lock string, args ...string) *sharedJob {
	t.Helper()
	dir := t.TempDir()
	j := &sharedJob{ready: filepath.Join(dir, "ready"), out: filepath.Join(dir, "out")}
	all := append([]string{"--lock", lock, "--report", "1s", "--wait", "2m"}, args...)
	cmd := gpuexecCmd(c.env(role("sharehold"), readyEnv+"="+j.ready, outEnv+"="+j.out), append(all, "--", helperBin)...)
	var err error
	if j.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	j.proc = startProc(t, cmd)
	return j
}

func (j *sharedJob) started() bool { _, err := os.Stat(j.ready); return err == nil }
func (j *sharedJob) end(t *testing.T) result {
	t.Helper()
	j.stdin.Close()
	return j.wait(t)
}

func awaitStarted(t *testing.T, jobs ...*sharedJob) {
	t.Helper()
	for _, j := range jobs {
		testsupport.Await(t, long, "a job started", func() bool {
			if j.exited() {
				t.Fatalf("gpuexec exited:\n%s", j.stderr())
			}
			return j.started()
		})
	}
}

func rtx4090(used int, apps ...gputest.App) gputest.Fixture {
	return frame([]gputest.GPU{gputest.RTX4090(0, gputest.UUID0, used)}, apps...)
}

// statusOf is status's human output and its JSON object's lock.
func statusOf(t *testing.T, c *card, lock string) (string, map[string]any) {
	t.Helper()
	r := gx(t, c.env(), "status", "--lock", lock)
	wantCode(t, r, 0)
	return r.stdout, testsupport.StatusJSON(t, long, gpuexecBin, lock)
}

func sharersOf(m map[string]any) []any {
	s, _ := m["sharers"].([]any)
	return s
}

// On a 24 GiB card three 10G sharers: two run side by side, the third waits
// saying why, and starts when one leaves. Each sees its budget.
func TestShareTwoOfThree(t *testing.T) {
	_, lock := lockIn(t)
	c := newCard(t, rtx4090(500))
	a := startShared(t, c, lock, "--share", "--vram", "10G", "--slug", "a")
	awaitStarted(t, a)
	b := startShared(t, c, lock, "--share", "--vram", "10G", "--slug", "b")
	awaitStarted(t, b)
	third := startShared(t, c, lock, "--share", "--vram", "10G", "--slug", "c")
	want := "waiting for 10.0 GiB shared on GPU 0: budgets 20.0 GiB (2 sharer(s)) + 500 MiB in use by others + 10.0 GiB > 22.5 GiB (24.0 GiB less 342 MiB reserved by the driver and a 1.2 GiB reserve)"
	testsupport.Await(t, long, "the third sharer's waiting line", func() bool { return strings.Contains(third.stderr(), want) })
	if third.started() {
		t.Fatal("a third 10G sharer started on a 24 GiB card")
	}
	if v, _ := os.ReadFile(a.out); string(v) != "10240" {
		t.Errorf("GPUEXEC_VRAM_MIB=%q, want 10240", v)
	}
	human, m := statusOf(t, c, lock)
	if len(sharersOf(m)) != 2 || m["budgetUsedMiB"] != float64(20480) || m["share"] != true {
		t.Fatalf("status --json: %v", m)
	}
	for _, w := range []string{"shared: 20.0 GiB of budgets by 2 job(s)", "/a (pid ", "/b (pid ", "budget 10.0 GiB", "GPU 0 shared: 20.0 GiB of budgets, 2.0 GiB left to share"} {
		if !strings.Contains(human, w) {
			t.Errorf("status lacks %q:\n%s", w, human)
		}
	}
	wantCode(t, a.end(t), 0)
	awaitStarted(t, third)
	wantCode(t, b.end(t), 0)
	if !lockExists(lock) {
		t.Fatal("the lock is gone while a sharer runs")
	}
	wantCode(t, third.end(t), 0)
	wantNoLock(t, lock)
}

// A whole-card job queued behind running sharers is served next, before a
// sharer that arrived after it although that one would fit.
func TestShareWholeCardAtTheHead(t *testing.T) {
	_, lock := lockIn(t)
	c := newCard(t, rtx4090(500))
	a := startShared(t, c, lock, "--share", "--vram", "4G", "--slug", "a")
	awaitStarted(t, a)
	whole := startShared(t, c, lock, "--slug", "whole")
	testsupport.Await(t, long, "the whole-card job queued", func() bool { return queueLen(t, lock) == 1 })
	later := startShared(t, c, lock, "--share", "--vram", "4G", "--slug", "later")
	testsupport.Await(t, long, "the later sharer queued", func() bool { return queueLen(t, lock) == 2 })
	testsupport.StillBlocked(t, 3*time.Second, "the later sharer", func() bool { return later.started() || whole.started() })
	wantCode(t, a.end(t), 0)
	awaitStarted(t, whole)
	testsupport.StillBlocked(t, 2*time.Second, "the later sharer beside the whole-card job", later.started)
	wantCode(t, whole.end(t), 0)
	awaitStarted(t, later)
	wantCode(t, later.end(t), 0)
	wantNoLock(t, lock)
}

// A sharer killed with SIGKILL frees its budget as soon as the kernel
// drops its locks: the waiting sharer starts, and the record names a live
// sharer again.
func TestShareKilledSharerFreesItsBudget(t *testing.T) {
	_, lock := lockIn(t)
	c := newCard(t, rtx4090(500))
	a := startShared(t, c, lock, "--share", "--vram", "10G", "--slug", "a")
	awaitStarted(t, a)
	b := startShared(t, c, lock, "--share", "--vram", "10G", "--slug", "b")
	awaitStarted(t, b)
	third := startShared(t, c, lock, "--share", "--vram", "10G", "--slug", "c")
	testsupport.Await(t, long, "the third sharer waits", func() bool { return strings.Contains(third.stderr(), "waiting for 10.0 GiB shared") })
	killed := time.Now()
	b.cmd.Process.Kill()
	<-b.done
	testsupport.Await(t, long, "the budget freed", func() bool {
		m := testsupport.StatusJSON(t, long, gpuexecBin, lock)
		return m["budgetUsedMiB"] == float64(10240) || m["budgetUsedMiB"] == float64(20480) && len(sharersOf(m)) == 2 && third.started()
	})
	freed := time.Since(killed)
	awaitStarted(t, third)
	startedAfter := time.Since(killed)
	t.Logf("SIGKILL of a sharer: budget freed (seen by status) %s after, waiting sharer started %s after", freed.Round(time.Millisecond), startedAfter.Round(time.Millisecond))
	if freed > 5*time.Second {
		t.Errorf("the killed sharer's budget was freed %s after the kill", freed)
	}
	testsupport.Await(t, long, "the record names a live sharer", func() bool {
		m := testsupport.StatusJSON(t, long, gpuexecBin, lock)
		pid, _ := m["pid"].(float64)
		return int(pid) == a.pid() || int(pid) == third.pid()
	})
	wantCode(t, a.end(t), 0)
	wantCode(t, third.end(t), 0)
	wantNoLock(t, lock)
}

// A sharer measured over its budget (plus the margin) is named in the log
// and in status; with --vram-enforce it is stopped and gpuexec exits 123.
func TestShareOverBudget(t *testing.T) {
	for _, enforce := range []bool{false, true} {
		t.Run(fmt.Sprint("enforce=", enforce), func(t *testing.T) {
			_, lock := lockIn(t)
			c := newCard(t, rtx4090(500))
			args := []string{"--share", "--vram", "2G", "--slug", "greedy"}
			if enforce {
				args = append(args, "--vram-enforce", "--kill-after", "2s")
			}
			j := startShared(t, c, lock, args...)
			awaitStarted(t, j)
			c.set(rtx4090(4500, gputest.App{GPU: gputest.UUID0, PIDFile: j.ready, Name: "/usr/bin/python3", Used: "4000"}))
			testsupport.Await(t, long, "the warning", func() bool {
				return strings.Contains(j.stderr(), "/greedy (pid ") && strings.Contains(j.stderr(), "over its budget of 2.0 GiB")
			})
			if enforce {
				r := j.wait(t)
				wantCode(t, r, 123)
				if !strings.Contains(r.stderr, "stopping it (--vram-enforce)") {
					t.Fatalf("stderr:\n%s", r.stderr)
				}
				wantNoLock(t, lock)
				return
			}
			testsupport.Await(t, long, "status names it", func() bool {
				human, _ := statusOf(t, c, lock)
				return strings.Contains(human, "budget 2.0 GiB, using 3.9 GiB: OVER BUDGET")
			})
			if s := sharersOf(testsupport.StatusJSON(t, long, gpuexecBin, lock)); len(s) != 1 || s[0].(map[string]any)["over"] != true {
				t.Fatalf("status --json sharers: %v", s)
			}
			wantCode(t, j.end(t), 0)
		})
	}
}

// Flags that make no sense alone are refused at once.
func TestShareFlags(t *testing.T) {
	_, lock := lockIn(t)
	c := newCard(t, rtx4090(500))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--share"}, "--share needs --vram SIZE"},
		{[]string{"--vram", "1G", "--vram-enforce"}, "--vram-enforce checks a sharer's budget: it needs --share"},
		{[]string{"--vram", "1G", "--reserve", "1G"}, "--reserve is what sharers leave free: it needs --share"},
		{[]string{"--share", "--vram", "24G"}, "GPU 0 has 22.5 GiB to share (24.0 GiB less 342 MiB reserved by the driver and a 1.2 GiB reserve)"},
	} {
		r := gx(t, c.env(role("exit")), append(append([]string{"--lock", lock}, tc.args...), "--", helperBin, "0")...)
		if r.code != 125 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %d\n%s", tc.args, r.code, r.stderr)
		}
	}
}
