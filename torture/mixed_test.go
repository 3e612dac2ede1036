//go:build linux

package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestMixedWithSeed: contenders that follow the seed article's Node code
// (lock/testdata/seedlock.cjs, a faithful re-creation, run with node) take
// turns on one lock with gpuexec contenders, some of which are interrupted
// (SIGINT) while they wait. Half of the gpuexec contenders take the plain
// lock, as the Node tool does; the others take devices of a two-GPU machine
// beside it (--gpus, a device's lock by its path), which the Node tool knows
// nothing of. Node and plain sections create a shared marker with
// O_CREAT|O_EXCL on entry and remove it on exit after checking it still
// names them (the Node tool's own overlap check); device sections watch
// that the marker is not there while they run; gpuexec's jobs also flock a
// truth file per card they use. Zero overlaps: in particular gpuexec never
// deletes a live Node holder's lock (the next gpuexec job would then enter
// beside it), and the Node tool sees the machine busy while a device job
// runs.
//
// Nothing here is SIGKILLed: a killed holder leaves a stale lock, and
// clearing one while Node processes also clear and create has a window that
// the seed's own protocol leaves open (see removeIfSame in package lock).
func TestMixedWithSeed(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH (.ci/run installs it)")
	}
	script, err := filepath.Abs(filepath.Join("..", "lock", "testdata", "seedlock.cjs"))
	if err != nil {
		t.Fatal(err)
	}
	sections, nodes := *flagMixed, *flagNodes
	const contenders = 8
	nodeRuns := max(1, sections/(4*max(nodes, 1)))
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	lock, work := lockDir(t)
	if err := os.MkdirAll(filepath.Dir(lock), 0o755); err != nil {
		t.Fatal(err)
	}
	truth, overlap, marker, done := filepath.Join(work, "truth"), filepath.Join(work, "overlap"),
		filepath.Join(work, "inside"), filepath.Join(work, "done")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+time.Duration(sections)*200*time.Millisecond)
	defer cancel()
	start := time.Now()

	// The Node contenders: each acquires, holds 1-3 ms, releases,
	// nodeRuns times, polling every 2-5 ms while it waits.
	var (
		nodeProcs []*gproc
		counted   []*nodeCount
	)
	for i := range nodes {
		cmd := exec.Command(node, script, "run", lock, "seed", fmt.Sprintf("n%d", i), strconv.Itoa(1+i%3), marker)
		cmd.Env = append(os.Environ(),
			"SEEDLOCK_POLL_MS="+strconv.Itoa(2+i%4),
			"SEEDLOCK_RUNS="+strconv.Itoa(nodeRuns),
			"SEEDLOCK_GAP_MS="+strconv.Itoa(i%3),
			"SEEDLOCK_MAX_WAIT_MS=240000",
		)
		p := startT(t, cmd)
		nodeProcs = append(nodeProcs, p)
		counted = append(counted, countNode(p))
	}

	// The gpuexec contenders.
	var (
		next, ints, early, goDone atomic.Int64
		mu                        sync.Mutex
		failures                  []string
	)
	fail := func(format string, a ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c := range contenders {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			for {
				id := int(next.Add(1)) - 1
				if id >= sections || ctx.Err() != nil {
					return
				}
				hold := time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Millisecond)))
				// Half of them take the plain lock, as the Node
				// tool does, and create its marker; the others
				// devices (see targets), and watch that the
				// marker is not there while they run.
				target, mark := 0, "-marker"
				if rng.IntN(2) == 1 {
					target, mark = 1+rng.IntN(len(targets)-1), "-marker-watch"
				}
				args := append(targets[target].args(lock), "--owner", "go", "--slug", fmt.Sprintf("g%d", id), "--wait", "4m", "--",
					jobBin, "-id", strconv.Itoa(id), "-hold", hold.String(), "-truth", truth, "-cards", "2", "-overlap", overlap,
					mark, marker, "-done", done, "-ignore-int")
				g, err := startG(gx(args...))
				if err != nil {
					fail("section %d: %v", id, err)
					return
				}
				interrupt := rng.IntN(20) == 0
				if interrupt {
					// While it waits: the job, once running,
					// ignores SIGINT and finishes its section.
					select {
					case <-g.wait:
						time.Sleep(time.Duration(rng.Int64N(int64(3 * time.Millisecond))))
						g.cmd.Process.Signal(syscall.SIGINT)
					case <-g.done:
					}
				}
				select {
				case <-g.done:
				case <-ctx.Done():
					g.cmd.Process.Kill()
					<-g.done
				}
				switch st := g.shellStatus(); {
				case st == 0:
					goDone.Add(1)
				case interrupt && st == 130 && !strings.Contains(g.stderr.String(), "job started"):
					ints.Add(1)
				case interrupt && st == 130 && !saidStart(g, id):
					// The lock came between the waiting line and
					// the signal, and the signal reached the job
					// before it could ignore it.
					early.Add(1)
				default:
					fail("section %d (interrupted: %v): status %d\n%s", id, interrupt, st, g.stderr)
				}
			}
		})
	}
	wg.Wait()

	goEnd := time.Now()

	nodeDone, nodeOverlaps, nodeDuring := 0, 0, 0
	for i, p := range nodeProcs {
		<-counted[i].eof
		select {
		case <-p.done:
		case <-ctx.Done():
			p.cmd.Process.Kill()
			<-p.done
		}
		c := counted[i]
		nodeDone += c.released
		nodeDuring += c.during(goEnd)
		for _, l := range c.overlaps {
			nodeOverlaps++
			t.Errorf("node %d: %s", i, l)
		}
		if st := p.shellStatus(); st != 0 {
			t.Errorf("node %d exited %d\n%s", i, st, p.stderr)
		}
	}
	wall := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("the mixed storm did not end in time\n%s", psTree())
	}
	for _, f := range failures {
		t.Error(f)
	}
	goOverlaps := readLines(t, overlap)
	for _, l := range goOverlaps {
		t.Errorf("overlap: %s", l)
	}
	if got := len(readLines(t, done)); int64(got) != goDone.Load() {
		t.Errorf("%d gpuexec jobs completed, but %d exited 0", got, goDone.Load())
	}
	if want := nodes * nodeRuns; nodeDone != want {
		t.Errorf("%d Node sections completed, want %d", nodeDone, want)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the marker %s was left behind", marker)
	}
	if l := leftovers(t, lock); len(l) > 0 {
		t.Errorf("left beside the lock: %v", l)
	}
	t.Logf("mixed storm: %d gpuexec sections (%d ran, %d interrupted while waiting, %d as their job began), %d Node sections by %d Node contenders (%d while gpuexec contenders queued), %d overlaps, wall %s",
		sections, goDone.Load(), ints.Load(), early.Load(), nodeDone, nodes, nodeDuring, len(goOverlaps)+nodeOverlaps, wall.Round(time.Millisecond))
}

// nodeCount tallies a Node contender's stdout: "ready PID TOKEN MS",
// "released MS", "overlap ...".
type nodeCount struct {
	eof      chan struct{}
	readyMs  []int64
	released int
	overlaps []string
}

func countNode(p *gproc) *nodeCount {
	c := &nodeCount{eof: make(chan struct{})}
	go func() {
		defer close(c.eof)
		for {
			select {
			case l := <-p.lines:
				c.add(l)
			case <-p.eof:
				for len(p.lines) > 0 {
					c.add(<-p.lines)
				}
				return
			}
		}
	}()
	return c
}

func (c *nodeCount) add(l string) {
	f := strings.Fields(l)
	switch {
	case len(f) == 4 && f[0] == "ready":
		if ms, err := strconv.ParseInt(f[3], 10, 64); err == nil {
			c.readyMs = append(c.readyMs, ms)
		}
	case len(f) > 0 && f[0] == "released":
		c.released++
	case strings.HasPrefix(l, "overlap"):
		c.overlaps = append(c.overlaps, l)
	}
}

// during counts the sections that began before t.
func (c *nodeCount) during(t time.Time) int {
	n := 0
	for _, ms := range c.readyMs {
		if ms < t.UnixMilli() {
			n++
		}
	}
	return n
}

// saidStart reports whether the ended section's job printed its "start"
// line (after which it ignores SIGINT), reading its stdout to the end.
func saidStart(g *gproc, id int) bool {
	select {
	case <-g.eof:
	case <-time.After(10 * time.Second):
		return true // judge it as started: the caller then reports it
	}
	want := fmt.Sprintf("start %d ", id)
	for {
		select {
		case l := <-g.lines:
			if strings.HasPrefix(l, want) {
				return true
			}
		default:
			return false
		}
	}
}
