//go:build linux

package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// kind is what the crash storm does to one section.
type kind int

const (
	leave   kind = iota // nothing: the job must run, once
	killGx              // SIGKILL gpuexec, at a random point
	killJob             // the job SIGKILLs itself, at a random point
	interr              // SIGINT to gpuexec, mostly while it waits
)

func (k kind) String() string {
	return [...]string{"leave", "kill-gpuexec", "kill-job", "sigint"}[k]
}

// plan is one section of the storm, drawn before it starts.
type plan struct {
	id   int
	kind kind
	// For killGx and interr: when the signal goes. "early": delay after
	// gpuexec starts (start-up, first try); "wait": delay after start,
	// mostly while queued (killGx), or delay after gpuexec logs that it
	// waits (interr); "hold": delay after the job reports its start.
	when  string
	delay time.Duration
	// For killJob: the job's -die.
	die       string
	hold      time.Duration
	gc        int           // grandchildren the job starts
	gcLife    time.Duration // their longest life (0: the storm's 30 ms)
	keepLive  bool          // grandchildren keep the liveness file
	heartbeat bool          // --heartbeat 2ms: the guard taken all the time
	// target is which lock of the folder the section takes (see
	// targets): the plain lock, or devices of the two-GPU machine.
	target int
}

// targets are the ways a section names its lock, all on one folder of a
// machine with two GPUs (-cards 2): the plain lock (every GPU), one GPU,
// both at once, the first free, and a device's lock by its path. Each
// section's job flocks a truth file per card it uses.
var targets = []struct {
	name string
	args func(lock string) []string
}{
	{"plain", func(lock string) []string { return []string{"--lock", lock} }},
	{"gpus 0", func(lock string) []string { return []string{"--lock", lock, "--gpus", "0"} }},
	{"gpus 1", func(lock string) []string { return []string{"--lock", lock, "--gpus", "1"} }},
	{"gpus 0,1 need 2", func(lock string) []string { return []string{"--lock", lock, "--gpus", "0,1", "--need", "2"} }},
	{"gpus all", func(lock string) []string { return []string{"--lock", lock, "--gpus", "all", "--gpu-count", "2"} }},
	{"gpu1.lock", func(lock string) []string { return []string{"--lock", filepath.Join(filepath.Dir(lock), "gpu1.lock")} }},
}

func (p plan) String() string {
	s := fmt.Sprintf("section %d: %s", p.id, p.kind)
	switch p.kind {
	case killGx, interr:
		s += fmt.Sprintf(" (%s +%s)", p.when, p.delay)
	case killJob:
		s += " (" + p.die + ")"
	}
	s += fmt.Sprintf(", hold %s, %s", p.hold, targets[p.target].name)
	if p.gc > 0 {
		s += fmt.Sprintf(", %d grandchildren (keep liveness file: %v)", p.gc, p.keepLive)
	}
	if p.heartbeat {
		s += ", heartbeat 2ms"
	}
	return s
}

// drawPlans draws every section's fate from seed.
func drawPlans(seed uint64, n int, killPct, intPct float64) []plan {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ms := func(lo, hi int) time.Duration {
		return time.Duration(lo)*time.Millisecond + time.Duration(rng.Int64N(int64(hi-lo)*int64(time.Millisecond)+1))
	}
	plans := make([]plan, n)
	for i := range plans {
		p := plan{id: i, hold: ms(1, 3)}
		switch r := rng.Float64() * 100; {
		case r < killPct/2:
			p.kind = killGx
			switch w := rng.IntN(10); {
			case w < 2:
				p.when, p.delay = "early", ms(0, 5)
			case w < 4:
				p.when, p.delay = "wait", ms(0, 150)
			case w < 7:
				p.when, p.delay = "hold", ms(0, int(p.hold/time.Millisecond)+3)
			default:
				// In the job's first 100 ms, with processes in its
				// group that outlive gpuexec, some of which closed
				// every file gpuexec passed on.
				p.when, p.delay, p.hold = "hold", ms(0, 100), ms(100, 150)
				p.gc, p.gcLife, p.keepLive = 1+rng.IntN(2), 200*time.Millisecond, rng.IntN(2) == 0
			}
		case r < killPct:
			p.kind = killJob
			switch w := rng.IntN(4); w {
			case 0:
				p.die = "before-flock"
			case 1:
				p.die = "after-flock"
			default:
				p.die = time.Duration(rng.Int64N(int64(p.hold) + 1)).String()
			}
		case r < killPct+intPct:
			p.kind = interr
			if rng.IntN(4) == 0 {
				p.when, p.delay = "early", ms(0, 100)
			} else {
				p.when, p.delay = "wait", ms(0, 3)
			}
		}
		if p.gc == 0 && rng.IntN(10) == 0 {
			p.gc = 1 + rng.IntN(2)
			p.keepLive = rng.IntN(2) == 0
		}
		p.heartbeat = rng.IntN(10) == 0
		// Half the sections take the plain lock, the others devices.
		if rng.IntN(2) == 1 {
			p.target = 1 + rng.IntN(len(targets)-1)
		}
		plans[i] = p
	}
	return plans
}

// outcome is how a section ended.
type outcome struct {
	plan
	ran         bool      // the gpuexec process was started at all
	status      int       // as a shell reports it
	killed      bool      // gpuexec died of SIGKILL
	interrupted bool      // gpuexec exited 130, or died of SIGINT
	began       time.Time // gpuexec started
	started     time.Time // its job reported its start
	finished    time.Time // its job reported the end of its section
	ended       time.Time // gpuexec exited
	stderr      string
}

// storm is a crash storm in progress.
type storm struct {
	lock, truth, overlap, done string
	poll                       time.Duration

	mu   sync.Mutex
	eofs []chan struct{} // of every section's stdout
}

func (s *storm) args(p plan) []string {
	args := append(targets[p.target].args(s.lock), "--owner", "storm", "--slug", fmt.Sprintf("s%d", p.id),
		"--wait", "30m", "--kill-after", "5s")
	if s.poll > 0 {
		args = append(args, "--poll", s.poll.String())
	}
	if p.heartbeat {
		args = append(args, "--heartbeat", "2ms")
	}
	args = append(args, "--", jobBin, "-id", strconv.Itoa(p.id), "-hold", p.hold.String(),
		"-truth", s.truth, "-cards", "2", "-overlap", s.overlap, "-done", s.done)
	if p.die != "" {
		args = append(args, "-die", p.die)
	}
	if p.gc > 0 {
		life := p.gcLife
		if life == 0 {
			life = 30 * time.Millisecond
		}
		args = append(args, "-gc", strconv.Itoa(p.gc), "-gc-life", life.String(), fmt.Sprintf("-gc-keep-live=%v", p.keepLive))
	}
	return args
}

// run runs one section to its end, doing to it what its plan says.
func (s *storm) run(ctx context.Context, p plan) outcome {
	o := outcome{plan: p}
	g, err := startG(gx(s.args(p)...))
	if err != nil {
		o.stderr = err.Error()
		return o
	}
	o.ran = true
	s.mu.Lock()
	s.eofs = append(s.eofs, g.eof)
	s.mu.Unlock()

	// The job's start, from its stdout.
	startedC := make(chan struct{})
	var started, finished atomic.Int64
	go func() {
		prefix, donePrefix := fmt.Sprintf("start %d ", p.id), fmt.Sprintf("done %d", p.id)
		for {
			select {
			case l := <-g.lines:
				if strings.HasPrefix(l, prefix) && started.Load() == 0 {
					started.Store(time.Now().UnixNano())
					close(startedC)
				}
				if l == donePrefix {
					finished.Store(time.Now().UnixNano())
				}
			case <-g.eof:
				return
			}
		}
	}()

	after := func(from <-chan struct{}, d time.Duration) <-chan time.Time {
		select {
		case <-from:
		case <-g.done:
			return nil
		}
		return time.After(d)
	}
	now := make(chan struct{})
	close(now)
	var fire <-chan time.Time
	var sig syscall.Signal
	switch p.kind {
	case killGx:
		sig = syscall.SIGKILL
		if p.when == "hold" {
			fire = after(startedC, p.delay)
		} else {
			fire = after(now, p.delay)
		}
	case interr:
		sig = syscall.SIGINT
		if p.when == "wait" {
			// Once it says it waits; or once its job runs, if it
			// never had to wait.
			either := make(chan struct{})
			go func() {
				select {
				case <-g.wait:
				case <-startedC:
				case <-g.done:
				}
				close(either)
			}()
			fire = after(either, p.delay)
		} else {
			fire = after(now, p.delay)
		}
	}
	select {
	case <-fire:
		g.cmd.Process.Signal(sig)
	case <-g.done:
	case <-ctx.Done():
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		g.cmd.Process.Kill()
		<-g.done
		o.stderr = "storm deadline passed; killed\n"
	}
	o.status = g.shellStatus()
	o.killed = g.killedBy(syscall.SIGKILL)
	o.interrupted = o.status == 128+int(syscall.SIGINT)
	if ns := started.Load(); ns != 0 {
		o.started = time.Unix(0, ns)
	}
	if ns := finished.Load(); ns != 0 {
		o.finished = time.Unix(0, ns)
	}
	o.began = g.began
	o.ended = g.ended
	o.stderr += g.stderr.String()
	return o
}

// check says what is wrong with a section's end; "" if nothing. done is how
// many times its job completed.
func (o outcome) check(done int) string {
	switch {
	case !o.ran:
		return "could not start gpuexec: " + o.stderr
	case strings.Contains(o.stderr, "panic:"):
		return "gpuexec panicked"
	case done > 1:
		return fmt.Sprintf("the job completed %d times", done)
	case o.killed:
		return "" // anything may have happened, short of the above
	case o.kind == killJob:
		if o.status != 128+int(syscall.SIGKILL) || done != 0 {
			return fmt.Sprintf("status %d and %d completed jobs; want 137 and none (the job died of SIGKILL)", o.status, done)
		}
		return ""
	case o.interrupted:
		return ""
	}
	if o.status != 0 || done != 1 {
		return fmt.Sprintf("status %d and %d completed jobs; want 0 and 1 (the job was not killed)", o.status, done)
	}
	return ""
}

// TestCrashStorm: contenders run thousands of critical sections on one lock
// while about -torture.kill-pct percent of them are SIGKILLed at random
// points (gpuexec itself, or its job) and -torture.int-pct percent are sent
// SIGINT, some with grandchildren that outlive their job. No two sections
// may ever overlap (each proves it is alone with a flock on a truth file),
// every job that was not killed must run exactly once, nothing may be left
// beside the lock, and the storm must end in bounded time. gpuexec runs with
// its default --poll (unless -torture.poll): release and death are noticed
// by wake-on-release and the liveness probe alone.
func TestCrashStorm(t *testing.T) {
	n, contenders := *flagSections, *flagContenders
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -torture.seed=%d)", seed, seed)
	lock, work := lockDir(t)
	s := &storm{
		lock:    lock,
		truth:   filepath.Join(work, "truth"),
		overlap: filepath.Join(work, "overlap"),
		done:    filepath.Join(work, "done"),
		poll:    *flagPoll,
	}
	plans := drawPlans(seed, n, *flagKillPct, *flagIntPct)
	// Wall time is bounded two ways. No hand-over may take longer than
	// maxGap: a release wakes the next waiter at once and a dead holder is
	// noticed by the liveness probe (100 ms); waiting out --poll (20 s) or
	// the 10 s write grace would show. And the storm must end before a
	// deadline generous enough for a slow, loaded machine, where starting
	// a process costs tens of milliseconds.
	const maxGap = 5 * time.Second
	deadline := 2*time.Minute + time.Duration(n)*100*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var completed atomic.Int64
	diagnosis := make(chan string, 1)
	watchdog := time.AfterFunc(deadline, func() {
		ents, _ := os.ReadDir(filepath.Dir(lock))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		diagnosis <- fmt.Sprintf("%d of %d sections done\nlock folder: %v\n%s", completed.Load(), n, names, psTree())
		cancel()
	})

	start := time.Now()
	outcomes := make([]outcome, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range contenders {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				outcomes[i] = s.run(ctx, plans[i])
				completed.Add(1)
				if outcomes[i].killed {
					reapOrphans()
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	if !watchdog.Stop() {
		t.Fatalf("the storm did not end within %s\n%s", deadline, <-diagnosis)
	}

	// Processes the killed jobs left (grandchildren) end on their own.
	for _, eof := range s.eofs {
		select {
		case <-eof:
		case <-time.After(long):
			t.Fatalf("a job's processes still run %s after the storm\n%s", long, psTree())
		}
	}
	reapOrphans()

	// One last, undisturbed job clears whatever the last killed ones
	// left: a stale lock, tickets of killed waiters.
	sweepStart := time.Now()
	sweep := startT(t, gx("--lock", lock, "--owner", "storm", "--slug", "sweep", "--wait", "1m", "--", "true"))
	mustExit(t, sweep)
	sweepTook := time.Since(sweepStart)
	if sweep.shellStatus() != 0 {
		t.Fatalf("the final job exited %d\n%s", sweep.shellStatus(), sweep.stderr)
	}

	overlaps := readLines(t, s.overlap)
	for _, l := range overlaps {
		t.Errorf("overlap: %s", l)
	}
	doneCount := make([]int, n)
	for _, l := range readLines(t, s.done) {
		var id int
		if _, err := fmt.Sscanf(l, "done %d", &id); err != nil || id < 0 || id >= n {
			t.Fatalf("bad line in the done file: %q", l)
		}
		doneCount[id]++
	}
	var (
		failed                       int
		gxKills, jobKills, ints, ran int
		starts                       []outcome
	)
	for i, o := range outcomes {
		if msg := o.check(doneCount[i]); msg != "" {
			failed++
			if failed <= 10 {
				t.Errorf("%s: %s\ngpuexec's log:\n%s", o.plan, msg, o.stderr)
			}
		}
		switch {
		case o.killed:
			gxKills++
		case o.kind == killJob && o.status == 128+int(syscall.SIGKILL):
			jobKills++
		case o.interrupted:
			ints++
		}
		ran += doneCount[i]
		if !o.started.IsZero() {
			starts = append(starts, o)
		}
	}
	if failed > 10 {
		t.Errorf("... and %d more sections went wrong", failed-10)
	}

	// The longest time between one job's start and the next one's: a
	// missed wake-up or an unnoticed dead holder shows here.
	sort.Slice(starts, func(i, j int) bool { return starts[i].started.Before(starts[j].started) })
	var gap time.Duration
	gapAt := -1
	for i := 1; i < len(starts); i++ {
		if d := starts[i].started.Sub(starts[i-1].started); d > gap {
			gap, gapAt = d, i
		}
	}
	if *flagProfile {
		profile(t, starts)
	}
	var debris []string
	for _, f := range leftovers(t, lock) {
		if !isDebris(lock, f) {
			t.Errorf("left beside the lock after the storm and a final job: %s", f)
			continue
		}
		debris = append(debris, f)
	}
	if len(debris) > 0 {
		msg := fmt.Sprintf("SIGKILLs between two of gpuexec's steps left %v, and the final job did not sweep them", debris)
		if *flagStrict {
			t.Error(msg)
		} else {
			t.Log(msg)
		}
	}
	t.Logf("crash storm: %d sections, %d contenders, %d SIGKILLs (%d gpuexec, %d job), %d SIGINTs, %d overlaps, %d jobs ran, %d debris files, wall %s (seed %d, poll %s)",
		n, contenders, gxKills+jobKills, gxKills, jobKills, ints, len(overlaps), ran, len(debris), wall.Round(time.Millisecond), seed, pollName(s.poll))
	if gapAt > 0 {
		t.Logf("longest gap between two jobs' starts: %s, before %s (previous: %s); final job took %s",
			gap.Round(time.Millisecond), starts[gapAt].plan, starts[gapAt-1].plan, sweepTook.Round(time.Millisecond))
	}
	if gap > maxGap {
		t.Errorf("a hand-over took %s (over %s): before %s (previous: %s)", gap.Round(time.Millisecond), maxGap, starts[gapAt].plan, starts[gapAt-1].plan)
	}
}

func pollName(d time.Duration) string {
	if d == 0 {
		return "default"
	}
	return d.String()
}

// profile logs where a section's share of the wall time goes, on average:
// from one job's start to the next one's.
func profile(t *testing.T, starts []outcome) {
	var run, exit, handoff time.Duration
	n := 0
	for i := 0; i+1 < len(starts); i++ {
		o, next := starts[i], starts[i+1]
		if o.finished.IsZero() || o.ended.IsZero() || o.kind != leave || o.gc > 0 {
			continue
		}
		run += o.finished.Sub(o.started)
		exit += o.ended.Sub(o.finished)
		handoff += next.started.Sub(o.ended)
		n++
	}
	if n == 0 {
		return
	}
	d := time.Duration(n)
	t.Logf("profile over %d undisturbed sections: job start to section end %s, to gpuexec's exit %s, to the next job's start %s",
		n, (run / d).Round(time.Microsecond), (exit / d).Round(time.Microsecond), (handoff / d).Round(time.Microsecond))
}

// isDebris reports whether name, beside lock, is what a SIGKILL of gpuexec
// between two of its steps leaves today and nothing sweeps: a liveness
// file nobody holds (killed after removing its record, or before writing
// it), a lock set aside under a "stale" name (killed between the rename
// and the removal of a release or a clearing), a temporary record (killed
// while rewriting its record). Such files are harmless only if no process
// holds their kernel lock; a liveness file that is held is no debris.
func isDebris(lock, name string) bool {
	base := filepath.Base(lock)
	if dev := deviceBase(lock, name); dev != "" {
		base = dev // a device's lock's leftovers, beside it
	}
	path := filepath.Join(filepath.Dir(lock), name)
	switch {
	case strings.HasPrefix(name, base+".live-"):
		f, err := os.Open(path)
		if err != nil {
			return false
		}
		defer f.Close()
		return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
	case strings.HasPrefix(name, base+".stale-"), strings.HasPrefix(name, base+".tmp-"):
		return true
	}
	return false
}

// deviceBase is the base name of the device lock (gpu0.lock) that name,
// beside lock, belongs to (the lock file or a file beside it); "" when none.
func deviceBase(lock, name string) string {
	ext := filepath.Ext(lock)
	stem := strings.TrimSuffix(filepath.Base(lock), ext)
	rest, ok := strings.CutPrefix(name, stem)
	if !ok {
		return ""
	}
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 || !strings.HasPrefix(rest[i:], ext) {
		return ""
	}
	return stem + rest[:i] + ext
}
