//go:build linux

package torture

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
)

// The share storm's job, run as this test binary: it records its start and
// end in a truth file per device, under a kernel lock, and checks at each
// start that the device's running budgets stay within capacity and that a
// whole-card job never overlaps anything.
const (
	shareJobEnv    = "GPUEXEC_TORTURE_SHARE_JOB"    // the truth folder
	shareBudgetEnv = "GPUEXEC_TORTURE_SHARE_BUDGET" // MiB; 0: a whole-card job
	shareCapEnv    = "GPUEXEC_TORTURE_SHARE_CAP"    // MiB a device's sharers may budget
)

func shareJob() int {
	dir := os.Getenv(shareJobEnv)
	budget, _ := strconv.Atoi(os.Getenv(shareBudgetEnv))
	capMiB, _ := strconv.Atoi(os.Getenv(shareCapEnv))
	dev := os.Getenv("CUDA_VISIBLE_DEVICES")
	step := func(start bool) error {
		m, err := os.OpenFile(filepath.Join(dir, "mutex"), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		defer m.Close()
		if err := unix.Flock(int(m.Fd()), unix.LOCK_EX); err != nil {
			return err
		}
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
		line := fmt.Sprintf("%d %s %s %d %d %d %d\n", time.Now().UnixNano(), dev, what, budget, sum, sharers, whole)
		if bad != "" {
			line += "BAD " + bad + "\n"
		}
		f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString(line)
		return err
	}
	if dev == "" || strings.Contains(dev, ",") {
		fmt.Fprintf(os.Stderr, "job: CUDA_VISIBLE_DEVICES=%q\n", dev)
		return 3
	}
	if err := step(true); err != nil {
		fmt.Fprintln(os.Stderr, "job:", err)
		return 3
	}
	// Long enough for the next sharer's admission (two readings of the
	// card, a quarter second apart) to find it running.
	time.Sleep(time.Duration(300+rand.IntN(500)) * time.Millisecond)
	if err := step(false); err != nil {
		fmt.Fprintln(os.Stderr, "job:", err)
		return 3
	}
	return 0
}

// TestShareStorm: sharers of random budgets and whole-card jobs, all queued
// at once for two 24 GiB cards. The truth file, written by the jobs under a
// kernel lock, must show for every moment each device's running budgets
// within its total less the reserve, and no whole-card job beside anything;
// every job runs, and sharers did run side by side.
func TestShareStorm(t *testing.T) {
	n := 30
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
	wholeJobs := 0
	for i := range n {
		budget := budgets[rand.IntN(len(budgets))]
		args := []string{"--lock", lock, "--gpus", "0,1", "--wait", "5m", "--slug", fmt.Sprint("job", i)}
		if i%5 == 4 {
			budget = 0
			wholeJobs++
		} else {
			args = append(args, "--share", "--vram", fmt.Sprint(budget, "M"))
		}
		cmd := gx(append(args, "--", self)...)
		cmd.Env = append(cmd.Env, gputest.Env+"="+fixture, "GPUEXEC_NVIDIA_SMI="+self,
			shareJobEnv+"="+work, shareBudgetEnv+"="+strconv.Itoa(budget), shareCapEnv+"="+strconv.Itoa(capMiB))
		wg.Go(func() {
			out, err := cmd.CombinedOutput()
			if err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("job %d: %v\n%s", i, err, out))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, f := range failed {
		t.Error(f)
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
	t.Logf("share storm: %d jobs (%d whole-card) on 2 devices; %d truth lines; at most %d sharers at once on a device", n, wholeJobs, len(lines), maxSharers)
	if starts != n {
		t.Errorf("%d jobs started, want %d", starts, n)
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
