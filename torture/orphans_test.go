//go:build linux

package torture

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// TestOrphansNeverShareTheGPU: gpuexec is SIGKILLed while its job's
// grandchildren run "on the GPU" (they share the job's flock on the truth
// file). The kernel kills the job itself (Pdeathsig); the grandchildren run
// on. While any of them runs, the job queued behind must not start, however
// long it waits; once they are gone it starts at once. The grandchildren
// either keep gpuexec's liveness file open (the common case: inherited fds)
// or close it, leaving the job's process group (childPgid in the record) as
// the only sign of life.
func TestOrphansNeverShareTheGPU(t *testing.T) {
	t.Parallel()
	for _, keepLive := range []bool{true, false} {
		name := "grandchildren keep the liveness file"
		if !keepLive {
			name = "grandchildren close the liveness file"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lock, work := lockDir(t)
			truth, overlap := filepath.Join(work, "truth"), filepath.Join(work, "overlap")
			release := filepath.Join(work, "release")
			a := startT(t, gx("--lock", lock, "--slug", "orphaner", "--",
				jobBin, "-id", "0", "-hold", "1h", "-truth", truth, "-overlap", overlap,
				"-gc", "3", "-gc-life", "1h", "-gc-release", release, "-gc-keep-live="+strconv.FormatBool(keepLive)))
			f := strings.Fields(nextLine(t, a, "start 0 ", long))
			job, _ := strconv.Atoi(f[2])
			var gcs []int
			for range 3 {
				f := strings.Fields(nextLine(t, a, "gc 0 ", long))
				pid, _ := strconv.Atoi(f[2])
				gcs = append(gcs, pid)
			}
			t.Cleanup(func() {
				os.WriteFile(release, nil, 0o644)
				for _, pid := range append(gcs, job) {
					testsupport.Poll(long, func() bool { return testsupport.Gone(pid) })
				}
			})
			// The record names the job's group before gpuexec dies: until
			// it does, processes that closed the liveness file are not
			// covered (README, Guarantees, "Not promised").
			testsupport.AwaitChildPGID(t, long, lock, job)

			b := startT(t, gx("--lock", lock, "--slug", "next", "--wait", "10m", "--",
				jobBin, "-id", "1", "-hold", "1ms", "-truth", truth, "-overlap", overlap))
			b.mustWait(t, "the next job")

			a.cmd.Process.Kill()
			mustExit(t, a)
			testsupport.Await(t, long, "the job to die with gpuexec", func() bool { return testsupport.Gone(job) })
			for _, pid := range gcs {
				if testsupport.Gone(pid) {
					t.Fatalf("grandchild %d died with gpuexec: nothing left to test", pid)
				}
			}
			// The waiter probes the holder every 100 ms: ten probes, and it
			// must still be waiting.
			testsupport.StillBlocked(t, time.Second, "the next job started or ended while the killed job's grandchildren run", func() bool {
				for {
					select {
					case l := <-b.lines:
						if strings.HasPrefix(l, "start 1 ") {
							t.Logf("the next job started:\n%s", b.stderr)
							return true
						}
					default:
						if b.exited() {
							t.Logf("the next job ended (status %d):\n%s", b.shellStatus(), b.stderr)
							return true
						}
						return false
					}
				}
			})
			st := testsupport.StatusJSON(t, long, gpuexecBin, lock)
			if st["state"] != "held" || st["alive"] != true {
				t.Errorf("status --json while the grandchildren run: %v, want held and alive", st)
			}

			// Let them go: the next job starts once the last is gone.
			if err := os.WriteFile(release, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			nextLine(t, b, "start 1 ", long)
			mustExit(t, b)
			if got := b.shellStatus(); got != 0 {
				t.Errorf("the next job's status is %d, want 0\n%s", got, b.stderr)
			}
			for _, l := range readLines(t, overlap) {
				t.Errorf("overlap: %s", l)
			}
			for _, pid := range gcs {
				if !testsupport.Gone(pid) {
					t.Errorf("grandchild %d still runs after the next job ran", pid)
				}
			}
			if l := leftovers(t, lock); len(l) > 0 {
				t.Errorf("left beside the lock: %v", l)
			}
		})
	}
}
