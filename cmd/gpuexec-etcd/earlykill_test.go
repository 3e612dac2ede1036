//go:build unix

package main

// gpuexec SIGKILLed in the first milliseconds of its job, before the 100 ms
// after which the job's group is written into the lock's record: the job's
// leftovers must keep the etcd lock held, whether they closed the
// descriptors they inherited (in the job's process group) or kept them
// (in the group, or in a session of their own), and the next job must
// start only once they are gone.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

const (
	stampEnv = "GPUEXEC_ETCD_TEST_STAMP" // stamp, detach: the file of the time it ended
	sleepEnv = "GPUEXEC_ETCD_TEST_SLEEP" // detach: how long it runs
)

func init() {
	// stamp: write the time (Unix nanoseconds) to $STAMP and exit: the
	// last thing a leftover of a job does.
	roles["stamp"] = stamp
	// detach: leave the job's process group and session (setsid),
	// keeping every descriptor it inherited, run $SLEEP, then stamp.
	roles["detach"] = func() int {
		if _, err := syscall.Setsid(); err != nil {
			fmt.Fprintln(os.Stderr, "detach:", err)
			return 2
		}
		d, err := time.ParseDuration(os.Getenv(sleepEnv))
		if err != nil {
			fmt.Fprintln(os.Stderr, "detach:", err)
			return 2
		}
		time.Sleep(d) // the leftover's work
		return stamp()
	}
}

func stamp() int {
	if err := writeAtomic(os.Getenv(stampEnv), strconv.FormatInt(time.Now().UnixNano(), 10)); err != nil {
		fmt.Fprintln(os.Stderr, "stamp:", err)
		return 2
	}
	return 0
}

// leftoverRuns is how long the killed job's leftover runs after gpuexec is
// killed: long enough that a next job let in by a lock released too soon
// starts well within it.
const leftoverRuns = 2 * time.Second

func TestKilledInTheJobsFirstMillisecondsKeepsTheLock(t *testing.T) {
	srv := sharedEtcd(t)
	secs := strconv.FormatFloat(leftoverRuns.Seconds(), 'f', -1, 64)
	// The job is a shell (it starts in a millisecond or two) that starts
	// its leftover in the background and writes the leftover's pid to
	// $READY; $0 is this test binary.
	for _, c := range []struct {
		name     string
		leftover string
	}{
		// Python's subprocess closes inherited descriptors by default.
		{"closes its descriptors", `exec 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-; sleep ` + secs + `; ` + roleEnv + `=stamp exec "$0"`},
		{"keeps its descriptors", `sleep ` + secs + `; ` + roleEnv + `=stamp exec "$0"`},
		{"keeps its descriptors in a session of its own", sleepEnv + `=` + secs + `s ` + roleEnv + `=detach exec "$0"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, work := t.TempDir(), t.TempDir()
			ready, end := filepath.Join(dir, "ready"), filepath.Join(dir, "end")
			// Cleanups run last first: the leftover is gone before its
			// folder is removed.
			t.Cleanup(func() { awaitLeftoverGone(t, ready) })
			url := srv.URL("gpuexec-e2e/early-kill/"+strings.ReplaceAll(c.name, " ", "-"), "ttl=10s")
			job := `(` + c.leftover + `) & echo $! > "$` + readyEnv + `"; wait`
			p := start(t, env(readyEnv+"="+ready, stampEnv+"="+end), "--lock", url, "--", "sh", "-c", job, jobBin)
			// Killed once gpuexec has told its helper the job's group
			// (its "job started" line comes just after): a kill before
			// that, microseconds after the start, is the window the
			// guarantees leave out, which a loaded machine hits.
			// The leftover's pid is whole in $READY (the shell opens the
			// file before it writes it) before the kill, which may take
			// the shell with it.
			waitFor(t, "the job's leftover to start", func() bool {
				b, err := os.ReadFile(ready)
				if p.exited() {
					t.Fatalf("gpuexec exited: %d\n%s", p.cmd.ProcessState.ExitCode(), p.err)
				}
				return err == nil && strings.HasSuffix(string(b), "\n") && strings.Contains(p.err.String(), "job started")
			})
			p.cmd.Process.Kill()
			killed := time.Now()
			// Reaped, not done: p.done waits for its output too, which
			// the leftover and the helper hold open.
			if !waitGone(p.cmd.Process.Pid) {
				t.Fatal("gpuexec did not die of SIGKILL")
			}

			next := start(t, env(roleEnv+"=critical", workEnv+"="+work, nameEnv+"=next"),
				"--lock", url, "--wait", "1m", "--slug", "next", "--", jobBin)
			if code := next.wait(t); code != 0 {
				t.Fatalf("next job: %d\n%s", code, next.err)
			}
			ran, ok := ranJobs(t, work)["next"]
			if !ok {
				t.Fatalf("the next job left no evidence\n%s", next.err)
			}
			b, err := os.ReadFile(end)
			if err != nil {
				t.Fatalf("the next job ran %s after gpuexec was killed, and the killed job's leftover has not ended (%v): they ran together\nkilled gpuexec:\n%s",
					ran.start.Sub(killed).Round(time.Millisecond), err, p.err)
			}
			ns, err := strconv.ParseInt(string(b), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", end, b, err)
			}
			if ended := time.Unix(0, ns); !ran.start.After(ended) {
				t.Errorf("the next job started %s before the killed job's leftover ended (%s after the kill): they ran together\nkilled gpuexec:\n%s",
					ended.Sub(ran.start).Round(time.Millisecond), ran.start.Sub(killed).Round(time.Millisecond), p.err)
			} else {
				t.Logf("the next job started %s after the leftover ended, %s after the kill",
					ran.start.Sub(ended).Round(time.Millisecond), ran.start.Sub(killed).Round(time.Millisecond))
			}
		})
	}
}

// awaitLeftoverGone waits until the process whose pid is in ready has
// ended (it ends by itself, leftoverRuns after it started), killing it if
// it has not within long.
func awaitLeftoverGone(t *testing.T, ready string) {
	b, err := os.ReadFile(ready)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Errorf("%s: %q", ready, b)
		return
	}
	if !waitGone(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the leftover %d did not end by itself", pid)
		waitGone(pid)
	}
}

// waitGone waits up to long for pid to end; false if it has not.
func waitGone(pid int) bool {
	return testsupport.Poll(long, func() bool { return testsupport.Gone(pid) })
}

// A storm on one etcd lock: contenders run short critical sections, and a
// third of their gpuexec processes are SIGKILLed within the first 100 ms of
// their job, which leaves a process in its group that runs on (some closed
// every descriptor they inherited, some kept them). Each section, and each
// leftover, holds a kernel lock on a truth file for as long as it runs,
// taken without waiting: no two may ever hold it at once.
func TestEarlyKillStorm(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("flock(1) is not installed")
		}
		t.Skip("flock(1) is not installed")
	}
	srv := sharedEtcd(t)
	url := srv.URL("gpuexec-e2e/early-kill-storm", "ttl=10s")
	dir := t.TempDir()
	truth, overlap := filepath.Join(dir, "truth"), filepath.Join(dir, "overlap")
	const procs, rounds = 4, 6
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	var leftovers []string
	kills := 0
	for i := range procs {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for r := range rounds {
				kill := rng.IntN(3) == 0
				ready := filepath.Join(dir, fmt.Sprintf("ready-%d-%d", i, r))
				// The section: the truth file's kernel lock (fd 9), a
				// leftover that keeps it (and, half the time, closes
				// every descriptor gpuexec passed on), a moment's work.
				closing := ""
				if rng.IntN(2) == 0 {
					closing = "exec 3>&- 4>&- 5>&- 6>&- 7>&- 8>&-; "
				}
				job := `exec 9>>"$TRUTH"; flock -n 9 || echo "overlap $$" >> "$OVERLAP"; ` +
					`(` + closing + `sleep 0.3) & echo $! > "$READY"; sleep 0.01; wait`
				p := start(t, env("TRUTH="+truth, "OVERLAP="+overlap, "READY="+ready),
					"--lock", url, "--wait", "2m", "--slug", fmt.Sprintf("p%d-r%d", i, r), "--", "sh", "-c", job)
				if kill {
					if !testsupport.Poll(2*time.Minute, func() bool { _, err := os.Stat(ready); return err == nil || p.exited() }) {
						mu.Lock()
						failures = append(failures, fmt.Sprintf("p%d-r%d: its job did not start", i, r))
						mu.Unlock()
						p.cmd.Process.Kill()
						return
					}
					time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
					p.cmd.Process.Kill()
					// Reaped, not done: its output is held open by the
					// leftover and the helper.
					waitGone(p.cmd.Process.Pid)
					mu.Lock()
					kills++
					leftovers = append(leftovers, ready)
					mu.Unlock()
					continue
				}
				select {
				case <-p.done:
				case <-time.After(3 * time.Minute):
					p.cmd.Process.Kill()
					<-p.done
				}
				if code := p.cmd.ProcessState.ExitCode(); code != 0 {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("p%d-r%d: exit %d\n%s", i, r, code, p.err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, ready := range leftovers {
		awaitLeftoverGone(t, ready)
	}
	for _, f := range failures {
		t.Error(f)
	}
	if b, err := os.ReadFile(overlap); err == nil {
		t.Errorf("sections overlapped:\n%s", b)
	}
	t.Logf("early-kill storm on etcd: %d sections, %d gpuexec SIGKILLed in their job's first 100 ms", procs*rounds, kills)
	testsupport.Await(t, long, "the lock free once every leftover is gone", func() bool { return statusJSON(t, url)["state"] == "free" })
}
