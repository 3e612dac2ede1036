//go:build unix

package cli

// One card, one job, through the real binary: a plain job (no --gpus) and a
// device job exclude each other however the device is named; the seed's
// Node tool sees the card busy while a device job runs; and a job's process
// group keeps its card held after its gpuexec is killed, whatever its
// heartbeat says and whether it was a sharer.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// cardsEnv is where the cards role keeps one truth file per card.
const cardsEnv = "GPUEXEC_TEST_CARDS"

// theCards are the GPUs of the machine the cards role pretends to run on.
var theCards = []string{"0", "1"}

func init() {
	// cards: a job that proves it is alone on every card it uses: those
	// CUDA_VISIBLE_DEVICES names, or, without it, every card of the
	// machine (what CUDA does). It takes a non-blocking flock on
	// $GPUEXEC_TEST_CARDS/card-N for each, which fails if another job
	// holds it at the same time; it then appends a line to
	// $GPUEXEC_TEST_OVERLAP. It holds them for a few milliseconds and
	// appends one line to $GPUEXEC_TEST_COUNT.
	helperRoles["cards"] = func([]string) int {
		cards := theCards
		if v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok {
			cards = strings.Split(v, ",")
		}
		for _, c := range cards {
			f, err := os.OpenFile(filepath.Join(os.Getenv(cardsEnv), "card-"+c), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				fmt.Fprintln(os.Stderr, "helper cards:", err)
				return 2
			}
			defer f.Close()
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
				appendLine(os.Getenv(overlapEnv), fmt.Sprintf("pid %d on card %s (CUDA_VISIBLE_DEVICES=%q): %v", os.Getpid(), c, os.Getenv("CUDA_VISIBLE_DEVICES"), err))
			}
		}
		time.Sleep(3 * time.Millisecond)
		if err := appendLine(os.Getenv(countEnv), strconv.Itoa(os.Getpid())); err != nil {
			fmt.Fprintln(os.Stderr, "helper cards:", err)
			return 2
		}
		return 0
	}
}

// seedTool runs the seed's Node tool (lock/testdata/seedlock.cjs) once on
// lock with a short wait, returning its exit status: 0 when it got the
// lock, 75 when it found it busy for the whole wait.
func seedTool(t *testing.T, lock string) (int, string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node is not installed")
		}
		t.Skip("node is not installed")
	}
	script, err := filepath.Abs(repoFile("lock/testdata/seedlock.cjs"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script, "run", lock, "node", "probe", "0")
	cmd.Env = testsupport.Env("SEEDLOCK_MAX_WAIT_MS=300", "SEEDLOCK_POLL_MS=50")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// A plain job and a --gpus job never run together on one folder: each
// waits for the other, whichever came first and however the device is
// named (--gpus, --gpus all, the device's lock by its path); and the seed's
// tool, which knows only the plain lock, sees the card busy while a device
// job runs.
func TestPlainAndDeviceJobsNeverShareTheCard(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	gpu0 := filepath.Join(dir, "gpu0.lock")

	h := startHolder(t, lock, "--gpus", "0")
	r := gx(t, nil, "--lock", lock, "--wait", "0", "--", "true")
	wantCode(t, r, 75)
	if !strings.Contains(r.stderr, "GPU 0: "+holderOwner+"/"+holderSlug) {
		t.Errorf("a plain job deferred behind GPU 0's holder does not name it:\n%s", r.stderr)
	}
	if code, out := seedTool(t, lock); code != 75 {
		t.Errorf("the seed's tool took the lock while a --gpus 0 job runs (exit %d):\n%s", code, out)
	}
	h.release()
	wantCode(t, h.p.wait(t), 0)

	h = startHolder(t, lock)
	for _, args := range [][]string{
		{"--lock", lock, "--gpus", "0"},
		{"--lock", lock, "--gpus", "1"},
		{"--lock", lock, "--gpus", "all", "--gpu-count", "2"},
		{"--lock", gpu0},
	} {
		r := gx(t, nil, append(args, "--wait", "0", "--", "true")...)
		wantCode(t, r, 75)
		if !strings.Contains(r.stderr, holderOwner+"/"+holderSlug) {
			t.Errorf("%v deferred behind the plain holder does not name it:\n%s", args, r.stderr)
		}
	}
	h.release()
	wantCode(t, h.p.wait(t), 0)

	// The device's lock by its path is that device: it excludes --gpus 0.
	h = startHolder(t, gpu0)
	wantCode(t, gx(t, nil, "--lock", lock, "--gpus", "0", "--wait", "0", "--", "true"), 75)
	wantCode(t, gx(t, nil, "--lock", lock, "--gpus", "1", "--wait", "0", "--", "true"), 0)
	h.release()
	wantCode(t, h.p.wait(t), 0)
	wantNoLock(t, lock)
}

// Plain jobs, jobs on one GPU or two, by --gpus and by a device lock's
// path, all on one folder of a two-GPU machine: no two ever use one card at
// once (the truth is a kernel lock per card), and all of them run.
func TestMixedJobsOnOneFolderNeverShareACard(t *testing.T) {
	t.Parallel()
	const procs, rounds = 6, 5
	dir, lock := lockIn(t)
	work := t.TempDir()
	overlap, count := filepath.Join(work, "overlap"), filepath.Join(work, "count")
	env := []string{role("cards"), cardsEnv + "=" + work, overlapEnv + "=" + overlap, countEnv + "=" + count}
	kinds := [][]string{
		{"--lock", lock},
		{"--lock", lock, "--gpus", "0"},
		{"--lock", lock, "--gpus", "1"},
		{"--lock", lock, "--gpus", "0,1", "--need", "2"},
		{"--lock", filepath.Join(dir, "gpu1.lock")},
		{"--lock", lock, "--gpus", "all", "--gpu-count", "2"},
	}
	runContenders(t, procs, rounds, 2*time.Minute, env, func(i, j int) []string {
		return append(append([]string{}, kinds[(i+j)%len(kinds)]...),
			"--wait", "2m", "--poll", "50ms", "--slug", fmt.Sprintf("p%d-r%d", i, j), "--", helperBin)
	})
	wantAllRanAlone(t, overlap, count, procs*rounds)
	wantNoLock(t, lock)
}

// One card is one lock whatever it is called: --gpus 07 is GPU 7's lock,
// a GPU's UUID is its index's lock (asked of nvidia-smi), and what names no
// card (-1, a UUID without nvidia-smi to tell its index, an index
// nvidia-smi does not list) is refused with one line before anything is
// created.
func TestOneCardOneLockName(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	out := filepath.Join(t.TempDir(), "out")
	r := gx(t, []string{role("cuda"), outEnv + "=" + out}, "--lock", lock, "--gpus", "07", "--", helperBin)
	wantCode(t, r, 0)
	if b, _ := os.ReadFile(out); !strings.HasPrefix(string(b), "visible=7 ") {
		t.Errorf("--gpus 07: the job sees %q, want CUDA_VISIBLE_DEVICES=7", b)
	}
	h := startHolder(t, lock, "--gpus", "7")
	wantCode(t, gx(t, nil, "--lock", lock, "--gpus", "07", "--wait", "0", "--", "true"), 75)
	h.release()
	wantCode(t, h.p.wait(t), 0)

	for _, tc := range []struct {
		gpus, stderr string
	}{
		{"-1", "not a GPU index"},
		{"0,00", "names device 0 twice"},
		{"64", "at most 63"},
		{gputest.UUID1, "needs nvidia-smi to tell its index"},
	} {
		r := gx(t, []string{"PATH=" + t.TempDir()}, "--lock", lock, "--gpus", tc.gpus, "--", "/bin/true")
		wantCode(t, r, 125)
		if len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("--gpus %s: stderr %q, want one line with %q", tc.gpus, r.stderr, tc.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "gpu-1.lock")); err == nil {
		t.Error("--gpus -1 made a lock file")
	}

	// With nvidia-smi, a UUID is its GPU's index: it excludes --gpus 1.
	c := newCard(t, frame([]gputest.GPU{gputest.RTX4090(0, gputest.UUID0, 0), gputest.RTX4090(1, gputest.UUID1, 0)}))
	h = startHolder(t, lock, "--gpus", "1")
	r = gx(t, c.env(), "--lock", lock, "--gpus", gputest.UUID1, "--wait", "0", "--", "true")
	wantCode(t, r, 75)
	prefix := gputest.UUID1[:12]
	r = gx(t, c.env(), "--lock", lock, "--gpus", prefix, "--wait", "0", "--", "true")
	wantCode(t, r, 75)
	h.release()
	wantCode(t, h.p.wait(t), 0)
	r = gx(t, c.env(), "--lock", lock, "--gpus", "2", "--", "true")
	wantCode(t, r, 125)
	if !strings.Contains(r.stderr, `names no GPU nvidia-smi lists (it lists 0, 1)`) {
		t.Errorf("--gpus 2 on a two-GPU machine: %q", r.stderr)
	}
}

// leftoverScript is a job that leaves a process in its group that closed
// every descriptor it inherited (as Python's subprocess does by default),
// writes "shell-pid leftover-pid" to $READY and waits.
const leftoverScript = `(exec 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-; exec sleep 300) & echo $$ $! > "$READY"; wait`

// killHolder SIGKILLs a gpuexec whose job is the shell of leftoverScript
// and returns once the shell died with it, the leftover still running.
func killHolder(t *testing.T, p *proc, pids []int) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	testsupport.Await(t, long, "the job's shell to die with gpuexec", func() bool { return testsupport.Gone(pids[0]) })
	if testsupport.Gone(pids[1]) {
		t.Fatal("the leftover died too; nothing left to test")
	}
}

// A SIGKILLed holder's job whose leftover closed its descriptors keeps the
// card held for as long as it runs, past --stale: its process group is
// evidence that the card is in use, as a held liveness lock is.
func TestOrphanedGroupOutlivesStale(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux-only")
	}
	_, lock := lockIn(t)
	quick := []string{"--stale", "3s", "--heartbeat", "1s", "--poll", "100ms"}
	p, pids := startShellJob(t, nil, append([]string{"--lock", lock, "--owner", "killed", "--slug", "job"}, quick...), leftoverScript)
	testsupport.AwaitChildPGID(t, long, lock, pids[0])
	killHolder(t, p, pids)
	// Well past --stale: the card is still in use.
	r := gx(t, nil, append(append([]string{"--lock", lock}, quick...), "--wait", "7s", "--", "true")...)
	wantCode(t, r, 75)
	if !strings.Contains(r.stderr, "still running") {
		t.Errorf("the deferred job does not say the group still runs:\n%s", r.stderr)
	}
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testsupport.Await(t, long, "the leftover to die", func() bool { return testsupport.Gone(pids[1]) })
	wantCode(t, gx(t, nil, append(append([]string{"--lock", lock}, quick...), "--wait", "10s", "--", "true")...), 0)
}

// A sharer's job that leaves a process in its group which closed its
// descriptors keeps the card held after that sharer's gpuexec is
// SIGKILLed, whether or not it created the shared record and whatever the
// other sharers do: no whole-card job starts beside it.
func TestSharerLeftoverKeepsTheCard(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux-only")
	}
	for _, killed := range []string{"the second sharer", "the first sharer"} {
		t.Run(killed, func(t *testing.T) {
			_, lock := lockIn(t)
			c := newCard(t, rtx4090(500))
			share := []string{"--lock", lock, "--share", "--vram", "2G", "--wait", "1m"}
			var victim *proc
			var pids []int
			var other *sharedJob
			if killed == "the first sharer" {
				victim, pids = startShellJob(t, c.env(), share, leftoverScript)
				other = startShared(t, c, lock, "--share", "--vram", "2G", "--slug", "s2")
				awaitStarted(t, other)
			} else {
				other = startShared(t, c, lock, "--share", "--vram", "2G", "--slug", "s1")
				awaitStarted(t, other)
				victim, pids = startShellJob(t, c.env(), share, leftoverScript)
			}
			// The sidecar has the job's group just after the job
			// starts (a SIGKILL before that is the window the
			// guarantees leave out).
			testsupport.AwaitSharerPGID(t, long, lock, pids[0])
			killHolder(t, victim, pids)
			wantCode(t, other.end(t), 0)
			r := gx(t, c.env(), "--lock", lock, "--wait", "3s", "--poll", "100ms", "--", "true")
			wantCode(t, r, 75)
			if !strings.Contains(r.stderr, "still run") {
				t.Errorf("the deferred job does not say the gone sharer's job still runs:\n%s", r.stderr)
			}
			if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			testsupport.Await(t, long, "the leftover to die", func() bool { return testsupport.Gone(pids[1]) })
			wantCode(t, gx(t, c.env(), "--lock", lock, "--wait", "10s", "--poll", "100ms", "--", "true"), 0)
			wantNoLock(t, lock)
		})
	}
}
