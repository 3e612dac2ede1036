//go:build linux

package torture

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// signalStorm sends 100 signals at p, cycling through sigs: 50 at once,
// then 50 more 10 ms apart (half a second), stopping early once p has been
// reaped.
func signalStorm(p *gproc, sigs []syscall.Signal) (sent int) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := range 100 {
		if p.cmd.Process.Signal(sigs[i%len(sigs)]) != nil {
			return sent // reaped: the rest would go nowhere
		}
		sent++
		if i >= 50 {
			<-tick.C
		}
	}
	return sent
}

// lockToken is the token in the lock record at path ("" if none).
func lockToken(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.Index(s, `"token":"`)
	if i < 0 {
		return ""
	}
	s = s[i+len(`"token":"`):]
	if j := strings.IndexByte(s, '"'); j >= 0 {
		return s[:j]
	}
	return ""
}

// TestSignalStorm: 100 SIGINT/SIGTERM within a second at gpuexec, while it
// waits and while it holds: it exits with the documented status (130/143
// while waiting; the job's own while holding, 137 when the job ignores them
// until --kill-after), its lock and ticket are gone, the job's group is
// gone, and the next waiter runs.
func TestSignalStorm(t *testing.T) {
	t.Parallel()
	kinds := []struct {
		name string
		sigs []syscall.Signal
		want []int // acceptable statuses, while waiting or for a job that dies of them
	}{
		{"SIGINT", []syscall.Signal{syscall.SIGINT}, []int{130}},
		{"SIGTERM", []syscall.Signal{syscall.SIGTERM}, []int{143}},
		// Whichever gpuexec (or the job) handles first decides.
		{"both", []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}, []int{130, 143}},
	}
	for _, k := range kinds {
		t.Run("waiting/"+k.name, func(t *testing.T) {
			t.Parallel()
			lock, work := lockDir(t)
			truth := filepath.Join(work, "truth")
			holder := startT(t, gx("--lock", lock, "--slug", "holder", "--", jobBin, "-id", "0", "-hold", "1h", "-truth", truth))
			nextLine(t, holder, "start 0 ", long)
			token := lockToken(lock)
			w := startT(t, gx("--lock", lock, "--slug", "waiter", "--wait", "10m", "--", jobBin, "-id", "1", "-hold", "1ms", "-truth", truth))
			w.mustWait(t, "the waiter")
			sent := signalStorm(w, k.sigs)
			mustExit(t, w)
			t.Logf("%d signals; status %d", sent, w.shellStatus())
			if got := w.shellStatus(); !slices.Contains(k.want, got) {
				t.Errorf("after %d signals the waiter's status is %d, want one of %v\n%s", sent, got, k.want, w.stderr)
			}
			if strings.Contains(w.stderr.String(), "job started") {
				t.Errorf("the waiter's job ran:\n%s", w.stderr)
			}
			if got := lockToken(lock); got != token {
				t.Errorf("the holder's lock changed: token %q, was %q", got, token)
			}
			for _, f := range leftovers(t, lock) {
				if strings.Contains(f, ".ticket-") {
					t.Errorf("the interrupted waiter left its ticket %s", f)
				}
			}
			// The holder, told to stop, releases the lock.
			holder.cmd.Process.Signal(syscall.SIGTERM)
			mustExit(t, holder)
			if got := holder.shellStatus(); got != 143 {
				t.Errorf("the holder's status is %d, want 143\n%s", got, holder.stderr)
			}
			if l := leftovers(t, lock); len(l) > 0 {
				t.Errorf("left beside the lock: %v", l)
			}
		})
		for _, ignoring := range []bool{false, true} {
			name := "holding/" + k.name
			if ignoring {
				name += "/job ignores them"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				lock, work := lockDir(t)
				truth, overlap := filepath.Join(work, "truth"), filepath.Join(work, "overlap")
				job := []string{"--", jobBin, "-id", "0", "-hold", "1h", "-truth", truth, "-overlap", overlap, "-gc", "2", "-gc-life", "1h", "-gc-keep-live"}
				want := k.want
				if ignoring {
					job = append(job, "-ignore-int")
					want = []int{128 + int(syscall.SIGKILL)}
				}
				h := startT(t, gx(append([]string{"--lock", lock, "--slug", "holder", "--kill-after", "1s"}, job...)...))
				nextLine(t, h, "start 0 ", long)
				var pids []int
				for range 2 {
					f := strings.Fields(nextLine(t, h, "gc 0 ", long))
					pid, _ := strconv.Atoi(f[2])
					pids = append(pids, pid)
				}
				w := startT(t, gx("--lock", lock, "--slug", "next", "--wait", "10m", "--", jobBin, "-id", "1", "-hold", "1ms", "-truth", truth, "-overlap", overlap))
				w.mustWait(t, "the next job")
				began := time.Now()
				sent := signalStorm(h, k.sigs)
				mustExit(t, h)
				took := time.Since(began)
				if got := h.shellStatus(); !slices.Contains(want, got) {
					t.Errorf("after %d signals the holder's status is %d, want one of %v\n%s", sent, got, want, h.stderr)
				}
				t.Logf("%d signals in %s; status %d", sent, took.Round(time.Millisecond), h.shellStatus())
				if ignoring && took < time.Second {
					t.Errorf("a job ignoring the signals was killed after %s, before --kill-after (1s)", took)
				}
				for _, pid := range pids {
					if !testsupport.Gone(pid) {
						t.Errorf("the job's grandchild %d outlived gpuexec", pid)
					}
				}
				mustExit(t, w)
				if got := w.shellStatus(); got != 0 {
					t.Errorf("the next job's status is %d, want 0\n%s", got, w.stderr)
				}
				for _, l := range readLines(t, overlap) {
					t.Errorf("overlap: %s", l)
				}
				if l := leftovers(t, lock); len(l) > 0 {
					t.Errorf("left beside the lock: %v", l)
				}
			})
		}
	}
}
