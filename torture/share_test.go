//go:build linux

package torture

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// The share storm's job, run as this test binary: it records its start and
// end in a truth file per device, under a kernel lock, and checks at each
// start that the device's running budgets stay within capacity and that a
// whole-card job never overlaps anything. It also holds a kernel lock per
// device it uses, shared for a sharer and exclusive for a whole-card job,
// taken without waiting (failing is an overlap): the kernel holds it for as
// long as the job or any process that inherited it runs, killed or not.
const (
	shareJobEnv    = "GPUEXEC_TORTURE_SHARE_JOB"    // the truth folder
	shareBudgetEnv = "GPUEXEC_TORTURE_SHARE_BUDGET" // MiB; 0: a whole-card job
	shareCapEnv    = "GPUEXEC_TORTURE_SHARE_CAP"    // MiB a device's sharers may budget
	shareModeEnv   = "GPUEXEC_TORTURE_SHARE_MODE"   // "", "leftover", or "leftover-child" (internal)
	shareReadyEnv  = "GPUEXEC_TORTURE_SHARE_READY"  // a file the job creates at its start
)

// shareDevices are the devices the share storm's job uses: those
// CUDA_VISIBLE_DEVICES names, else (a job without --gpus) both.
func shareDevices() []string {
	if v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok {
		return strings.Split(v, ",")
	}
	return []string{"0", "1"}
}

// shareStep records the start or end of a job of budget (0: whole card) on
// devs in the truth folder dir, under its mutex, saying BAD when it breaks
// a rule.
func shareStep(dir string, devs []string, budget, capMiB int, start bool, extra string) error {
	m, err := os.OpenFile(filepath.Join(dir, "mutex"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := unix.Flock(int(m.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	var lines string
	if extra != "" {
		lines = "BAD " + extra + "\n"
	}
	for _, dev := range devs {
		state := filepath.Join(dir, "dev-"+dev)
		var sum, sharers, whole int
		if b, err := os.ReadFile(state); err == nil {
			fmt.Sscan(string(b), &sum, &sharers, &whole)
		}
		var bad string
		switch {
		case start && budget == 0 && (sharers > 0 || whole > 0):
			bad = fmt.Sprintf("whole-card job started on GPU %s beside %d sharer(s) and %d whole-card job(s)", dev, sharers, whole)
		case start && budget > 0 && whole > 0:
			bad = fmt.Sprintf("sharer started on GPU %s beside a whole-card job", dev)
		case start && budget > 0 && sum+budget > capMiB:
			bad = fmt.Sprintf("sharer of %d MiB started on GPU %s with %d MiB budgeted: over %d", budget, dev, sum, capMiB)
		}
		d := 1
		if !start {
			d = -1
		}
		if budget == 0 {
			whole += d
		} else {
			sum += d * budget
			sharers += d
		}
		if err := os.WriteFile(state, fmt.Appendf(nil, "%d %d %d", sum, sharers, whole), 0o644); err != nil {
			return err
		}
		what := "start"
		if !start {
			what = "end"
		}
		lines += fmt.Sprintf("%d %s %s %d %d %d %d\n", time.Now().UnixNano(), dev, what, budget, sum, sharers, whole)
		if bad != "" {
			lines += "BAD " + bad + "\n"
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(lines)
	return err
}

// shareTruth takes the job's kernel lock on each device's truth file
// (shared for a sharer, exclusive for a whole-card job), without waiting;
// what could not be taken is an overlap, said in the returned text.
func shareTruth(dir string, devs []string, budget int) ([]*os.File, string) {
	how, what := unix.LOCK_SH, "sharer"
	if budget == 0 {
		how, what = unix.LOCK_EX, "whole-card job"
	}
	var files []*os.File
	var bad []string
	for _, dev := range devs {
		f, err := os.OpenFile(filepath.Join(dir, "truth-"+dev), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		files = append(files, f)
		if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
			bad = append(bad, fmt.Sprintf("OVERLAP: a %s (pid %d) found GPU %s's truth file locked: %v", what, os.Getpid(), dev, err))
		}
	}
	return files, strings.Join(bad, "; ")
}

func shareJob() int {
	dir := os.Getenv(shareJobEnv)
	budget, _ := strconv.Atoi(os.Getenv(shareBudgetEnv))
	capMiB, _ := strconv.Atoi(os.Getenv(shareCapEnv))
	devs := shareDevices()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "job:", err)
		return 3
	}
	if os.Getenv(shareModeEnv) == "leftover-child" {
		// A process of a sharer's job that closed every file gpuexec
		// passed on (it has only its truth files, as fds 3, 4, ...) and
		// stays in the job's group: it is on the card until it ends,
		// whatever happens to its gpuexec.
		// SIGTERM is caught before the start is recorded: one that came
		// between the two would end it with its start counted and its
		// end never (a whole-card job after it then reads as an
		// overlap, while the kernel lock shows none).
		ended := make(chan os.Signal, 1)
		signal.Notify(ended, unix.SIGTERM)
		if err := shareStep(dir, devs, budget, capMiB, true, ""); err != nil {
			return fail(err)
		}
		select {
		case <-ended: // its gpuexec stops what the job left behind
		case <-time.After(time.Duration(300+rand.IntN(500)) * time.Millisecond):
		}
		if err := shareStep(dir, devs, budget, capMiB, false, ""); err != nil {
			return fail(err)
		}
		return 0
	}
	if ready := os.Getenv(shareReadyEnv); ready != "" {
		os.WriteFile(ready, nil, 0o644)
	}
	truth, bad := shareTruth(dir, devs, budget)
	if os.Getenv(shareModeEnv) == "leftover" {
		if bad != "" {
			return fail(shareStep(dir, nil, budget, capMiB, true, bad))
		}
		// Only the truth files go on: Go closes every other file.
		self, err := os.Executable()
		if err != nil {
			return fail(err)
		}
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), shareModeEnv+"=leftover-child")
		cmd.ExtraFiles = truth
		if err := cmd.Start(); err != nil {
			return fail(err)
		}
		// Not waited for: it outlives this job.
		cmd.Process.Release()
		return 0
	}
	if err := shareStep(dir, devs, budget, capMiB, true, bad); err != nil {
		return fail(err)
	}
	// Long enough for the next sharer's admission (two readings of the
	// card, a quarter second apart) to find it running.
	time.Sleep(time.Duration(300+rand.IntN(500)) * time.Millisecond)
	if err := shareStep(dir, devs, budget, capMiB, false, ""); err != nil {
		return fail(err)
	}
	return 0
}

// TestShareStorm: sharers of random budgets and whole-card jobs, all queued
// at once for two 24 GiB cards, some for both (--gpus 0,1) and some without
// --gpus (the plain lock: every card). A third of the sharers leave a
// process in their group that closed every file gpuexec passed on (as
// Python's subprocess does) and outlives the job; half of those have their
// gpuexec SIGKILLed within 100 ms of the job's start. The truth file,
// written by the jobs under a kernel lock, must show for every moment each
// device's running budgets within its total less the reserve, and no
// whole-card job beside anything (also by a kernel lock per card that the
// leftovers hold); every job not killed runs, and sharers did run side by
// side.
func TestShareStorm(t *testing.T) {
	n := 36
	lock, work := lockDir(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fixture := filepath.Join(work, "smi.json")
	gputest.Write(t, fixture, gputest.Fixture{Frames: []gputest.Frame{{GPUs: []gputest.GPU{
		gputest.RTX4090(0, gputest.UUID0, 500), gputest.RTX4090(1, gputest.UUID1, 500),
	}}}})
	const capMiB = 24564 - 1228 // total less the default reserve (5%)
	budgets := []int{3072, 5120, 8192, 10240}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	wholeJobs, plainJobs, leavers, kills := 0, 0, 0, 0
	for i := range n {
		budget := budgets[rand.IntN(len(budgets))]
		args := []string{"--lock", lock, "--wait", "5m", "--slug", fmt.Sprint("job", i)}
		if i%3 == 2 {
			plainJobs++
		} else {
			args = append(args, "--gpus", "0,1")
		}
		mode, kill := "", false
		switch {
		case i%5 == 4:
			budget = 0
			wholeJobs++
		case i%3 == 0:
			mode, kill = "leftover", i%2 == 0
			leavers++
			fallthrough
		default:
			args = append(args, "--share", "--vram", fmt.Sprint(budget, "M"))
		}
		if kill {
			kills++
		}
		ready := filepath.Join(work, fmt.Sprint("ready-", i))
		cmd := gx(append(args, "--", self)...)
		cmd.Env = append(cmd.Env, gputest.Env+"="+fixture, "GPUEXEC_NVIDIA_SMI="+self,
			shareJobEnv+"="+work, shareBudgetEnv+"="+strconv.Itoa(budget), shareCapEnv+"="+strconv.Itoa(capMiB),
			shareModeEnv+"="+mode, shareReadyEnv+"="+ready)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if kill {
				// Within the job's first 100 ms.
				go func() {
					deadline := time.Now().Add(5 * time.Minute)
					for time.Now().Before(deadline) {
						if _, err := os.Stat(ready); err == nil {
							time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
							cmd.Process.Kill()
							return
						}
						time.Sleep(2 * time.Millisecond)
					}
				}()
			}
			err := cmd.Wait()
			if err != nil && !(kill && cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL) {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("job %d: %v\n%s", i, err, out.String()))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, f := range failed {
		t.Error(f)
	}
	// The leftovers of killed sharers end on their own within a second.
	testsupport.Await(t, long, "the killed sharers' leftovers to end", func() bool {
		reapShareOrphans()
		return !leftoversRun(work)
	})
	// One last whole-card job on both cards clears what the killed
	// sharers left.
	sweep := gx("--lock", lock, "--gpus", "0,1", "--need", "2", "--wait", "1m", "--", "true")
	if out, err := sweep.CombinedOutput(); err != nil {
		t.Fatalf("the final job: %v\n%s", err, out)
	}
	lines := readLines(t, filepath.Join(work, "log"))
	starts, maxSharers := 0, 0
	for _, l := range lines {
		if strings.HasPrefix(l, "BAD ") {
			t.Error(l)
			continue
		}
		var at int64
		var dev, what string
		var budget, sum, sharers, whole int
		if _, err := fmt.Sscan(l, &at, &dev, &what, &budget, &sum, &sharers, &whole); err != nil {
			t.Errorf("truth line %q: %v", l, err)
			continue
		}
		if what == "start" {
			starts++
		}
		maxSharers = max(maxSharers, sharers)
	}
	t.Logf("share storm: %d jobs (%d whole-card, %d without --gpus, %d sharers leaving a process that closed its files, %d of them SIGKILLed in the job's first 100 ms) on 2 devices; %d truth lines; at most %d sharers at once on a device",
		n, wholeJobs, plainJobs, leavers, kills, len(lines), maxSharers)
	if starts < n-kills {
		t.Errorf("%d device starts, want at least one per job not killed (%d)", starts, n-kills)
	}
	if maxSharers < 2 {
		t.Error("no two sharers ever ran side by side")
	}
	var odd []string
	for _, f := range leftovers(t, lock) {
		if f != "gpu0.lock.guard" && f != "gpu1.lock.guard" { // the devices' permanent guards
			odd = append(odd, f)
		}
	}
	if len(odd) > 0 {
		t.Errorf("left beside the lock: %v", odd)
	}
}

// leftoversRun reports whether a leftover process of the share storm still
// runs: the truth log has more starts than ends.
func leftoversRun(work string) bool {
	b, _ := os.ReadFile(filepath.Join(work, "log"))
	return strings.Count(string(b), " start ") != strings.Count(string(b), " end ")
}

// reapShareOrphans collects exited share-storm processes re-parented to
// this process (the subreaper): leftovers of sharers whose gpuexec was
// SIGKILLed, which run as this test binary.
func reapShareOrphans() {
	self, err := os.Executable()
	if err != nil {
		return
	}
	comm := filepath.Base(self)
	if len(comm) > 15 {
		comm = comm[:15] // the kernel's length for a command name
	}
	reapZombies(comm)
}
