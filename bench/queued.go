//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// settle is how long (g) and (h) wait once all waiters are seen queued:
// a waiter is seen queued (its ticket written, blocked in flock(2), its
// first "waiting" line) a little before it is done starting up (a gpuexec
// waiter still sets up its watch), so that what follows finds them all
// waiting and none of their start-up is measured.
const settle = 500 * time.Millisecond

// seedMaxCPUWaiters is the most seed waiters (h) runs: each is a node
// process polling, about 40 MB each.
const seedMaxCPUWaiters = 10

// waitersCPU is what (h) measured of one contender at one number of
// waiters.
type waitersCPU struct {
	cpu, waited time.Duration
	skipped     string // why it did not run
	err         string
}

// batch is waiters started at once on one lock.
type batch struct {
	procs []*proc
	spawn []int64  // when each was started, Unix ns
	outs  []string // their stdout logs ("" if none)
	errfs []string // their stderr logs (not for the seed)
	errls []*lines // the seed's stderr: its first line says it waits
}

// startBatch starts n waiters, argv(i) and env(i) each, as fast as it can,
// their stdout to logs named name-I.out when withOut. The batch it returns
// holds those started even when it fails: kill it.
func (b *bench) startBatch(ctx context.Context, c *contender, name string, n int, withOut bool, cmd func(i int) (argv, env []string)) (*batch, error) {
	bt := &batch{}
	for i := range n {
		var stdout, stderr io.Writer
		var outName, errName string
		var l *lines
		var files []*os.File
		if withOut {
			f, err := b.logFile(fmt.Sprintf("%s-%d.out", name, i))
			if err != nil {
				return bt, err
			}
			files = append(files, f)
			stdout, outName = f, f.Name()
		}
		if c.kind == kSeed {
			l = newLines()
			stderr = l
		} else {
			f, err := b.logFile(fmt.Sprintf("%s-%d.err", name, i))
			if err != nil {
				closeAll(files)
				return bt, err
			}
			files = append(files, f)
			stderr, errName = f, f.Name()
		}
		argv, env := cmd(i)
		t := time.Now().UnixNano()
		p, err := start(ctx, argv, env, false, stdout, stderr)
		closeAll(files)
		if err != nil {
			return bt, err
		}
		bt.procs = append(bt.procs, p)
		bt.spawn = append(bt.spawn, t)
		bt.outs = append(bt.outs, outName)
		bt.errfs = append(bt.errfs, errName)
		bt.errls = append(bt.errls, l)
	}
	return bt, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// kill ends the waiters still running.
func (bt *batch) kill() {
	for _, p := range bt.procs {
		p.kill()
	}
}

// stderr is the end of waiter i's stderr, for error messages.
func (bt *batch) stderr(i int) string {
	if l := bt.errls[i]; l != nil {
		if s := l.String(); s != "" {
			return "\n" + s
		}
		return ""
	}
	return tail(bt.errfs[i])
}

// awaitAll waits, up to limit, until all of the batch's waiters are
// visibly queued on lock: for gpuexec, there are as many tickets
// (<lock>.ticket-*) beside the lock as waiters (the holder took the free
// lock without one); for flock(1), /proc/locks shows each blocked in
// flock(2); for the seed, each printed its first "waiting" line (on
// stderr) after its first failed try. A waiter that exits first fails it.
func (b *bench) awaitAll(ctx context.Context, c *contender, lock string, bt *batch, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	n := len(bt.procs)
	if c.kind == kSeed {
		for i, p := range bt.procs {
			if _, err := bt.errls[i].first(ctx, p, max(time.Until(deadline), time.Millisecond)); err != nil {
				return fmt.Errorf("waiter %d: %v%s", i, err, bt.stderr(i))
			}
		}
		return nil
	}
	for {
		var got int
		switch c.kind {
		case kGpuexec:
			var err error
			if got, err = countTickets(lock); err != nil {
				return err
			}
		default:
			blocked, err := flockWaiters()
			if err != nil {
				return err
			}
			for _, p := range bt.procs {
				if blocked[p.pid()] {
					got++
				}
			}
		}
		if got >= n {
			return nil
		}
		for i, p := range bt.procs {
			select {
			case <-p.done:
				return fmt.Errorf("waiter %d (%s) exited before it was queued: %v%s", i, p.name(), p.err, bt.stderr(i))
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d waiters seen queued after %s", got, n, limit)
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// countTickets counts gpuexec's queue tickets beside lock:
// "<lock>.ticket-" and 20 digits. It only lists the folder: reading it
// wakes no waiter's watch.
func countTickets(lock string) (int, error) {
	ents, err := os.ReadDir(filepath.Dir(lock))
	if err != nil {
		return 0, err
	}
	prefix := filepath.Base(lock) + ".ticket-"
	n := 0
	for _, e := range ents {
		if rest, ok := strings.CutPrefix(e.Name(), prefix); ok && len(rest) == 20 && strings.Trim(rest, "0123456789") == "" {
			n++
		}
	}
	return n, nil
}

// chain is (g): per round, each contender in turn (the order rotating), a
// chain of waiters queued at once behind a holder.
func (b *bench) chain(ctx context.Context) {
	cs := b.available()
	rounds := b.cfg.chainRounds
	b.logf("(g) pre-queued chain: %d round(s) of %d waiters holding %s; seed poll %s",
		rounds, b.cfg.chainWaiters, b.cfg.chainHold, b.cfg.seedHandoffPoll)
	for r := range rounds {
		for j := range cs {
			c := cs[(r+j)%len(cs)]
			if c.errs['g'] != "" || ctx.Err() != nil {
				continue
			}
			t0 := time.Now()
			secs, err := b.chainRound(ctx, c, r)
			if err != nil {
				b.fail(c, 'g', err)
				continue
			}
			gaps, _, overlaps := analyze(secs)
			c.chainGaps = append(c.chainGaps, gaps...)
			c.chainSections += len(secs)
			c.chainOverlaps += overlaps
			c.chainRounds++
			b.logf("(g) round %d/%d %s: %d sections in %s, gap p50 %s ms, p90 %s ms, %d overlaps",
				r+1, rounds, c.name, len(secs), time.Since(t0).Round(10*time.Millisecond),
				ms(pct(sorted(gaps), 0.5)), ms(pct(sorted(gaps), 0.9)), overlaps)
		}
	}
}

// chainRound starts a holder, then -chain-waiters wrappers around a
// critical section holding -chain-hold at once; once all are seen queued
// (and settle more), the holder releases. It returns the waiters'
// sections.
func (b *bench) chainRound(ctx context.Context, c *contender, round int) ([]section, error) {
	n, hold := b.cfg.chainWaiters, b.cfg.chainHold
	queueLimit := 30*time.Second + time.Duration(n)*time.Second
	ctx, cancel := context.WithTimeout(ctx, queueLimit+time.Duration(n)*(hold+5*time.Second+2*b.cfg.seedHandoffPoll)+time.Minute)
	defer cancel()
	dir, err := b.lockDir("g", c)
	if err != nil {
		return nil, err
	}
	lock := filepath.Join(dir, "gpu.lock")
	truth := filepath.Join(b.dir, filepath.Base(dir)+".truth")
	name := fmt.Sprintf("g-%s-r%d", c.short, round)
	holder, err := b.startHolder(ctx, c, lock, name+"-holder.err", b.cfg.seedHandoffPoll)
	if err != nil {
		return nil, err
	}
	defer holder.kill()
	bt, err := b.startBatch(ctx, c, name, n, true, func(i int) ([]string, []string) {
		tag := fmt.Sprintf("%03d", i)
		if c.kind == kSeed {
			return c.seedRun(lock, "w"+tag, strconv.FormatInt(hold.Milliseconds(), 10), truth), b.envFor(c, b.cfg.seedHandoffPoll)
		}
		return c.wrap(lock, b.self), b.envFor(c, b.cfg.seedHandoffPoll,
			truthEnv+"="+truth, holdEnv+"="+hold.String(), tagEnv+"="+tag, roleEnv+"=critical")
	})
	defer bt.kill()
	if err != nil {
		return nil, err
	}
	if err := b.awaitAll(ctx, c, lock, bt, queueLimit); err != nil {
		return nil, err
	}
	if !sleepCtx(ctx, settle) {
		return nil, ctx.Err()
	}
	if err := release(holder); err != nil {
		return nil, fmt.Errorf("holder: %v", err)
	}
	var secs []section
	for i, w := range bt.procs {
		<-w.done
		// The seed's tool exits 3 when it found another inside: an
		// overlap, counted from its log.
		if w.err != nil && !(c.kind == kSeed && exitCode(w.err) == 3) {
			return nil, fmt.Errorf("waiter %d: %v%s%s", i, w.err, tail(bt.outs[i]), bt.stderr(i))
		}
		s, err := parseSections(bt.outs[i])
		if err != nil {
			return nil, err
		}
		if len(s) != 1 {
			return nil, fmt.Errorf("waiter %d logged %d sections, want 1", i, len(s))
		}
		s[0].spawn = bt.spawn[i] // before the holder let go: queued
		secs = append(secs, s[0])
	}
	return secs, ctx.Err()
}

// queuedCPU is (h): for each number of waiters, all contenders at once,
// each on its own lock.
func (b *bench) queuedCPU(ctx context.Context) {
	for _, n := range b.cfg.cpuWaiters {
		if ctx.Err() != nil {
			return
		}
		b.logf("(h) %d queued waiter(s) each behind a holder, %s of waiting; seed poll %s", n, b.cfg.waitCPU, b.cfg.seedPoll)
		var wg sync.WaitGroup
		for _, c := range b.available() {
			if c.kind == kSeed && n > seedMaxCPUWaiters {
				b.setQueuedCPU(c, n, waitersCPU{skipped: fmt.Sprintf("skipped (> %d node pollers)", seedMaxCPUWaiters)})
				continue
			}
			wg.Go(func() {
				t0 := time.Now()
				cpu, waited, err := b.queuedCPUOne(ctx, c, n)
				if err != nil {
					b.pmu.Lock()
					b.failed = true
					b.pmu.Unlock()
					b.logf("(h) %s, %d waiter(s): %v", c.name, n, err)
					b.setQueuedCPU(c, n, waitersCPU{err: err.Error()})
					return
				}
				b.setQueuedCPU(c, n, waitersCPU{cpu: cpu, waited: waited})
				b.logf("(h) %s, %d waiter(s): %.2f s of CPU in %s (%.3f%% of a core); all done in %s",
					c.name, n, cpu.Seconds(), waited.Round(time.Millisecond), 100*cpu.Seconds()/waited.Seconds(),
					time.Since(t0).Round(10*time.Millisecond))
			})
		}
		wg.Wait()
	}
}

func (b *bench) setQueuedCPU(c *contender, n int, r waitersCPU) {
	b.pmu.Lock()
	defer b.pmu.Unlock()
	if c.queuedCPU == nil {
		c.queuedCPU = map[int]waitersCPU{}
	}
	c.queuedCPU[n] = r
}

// queuedCPUOne queues n waiters behind a holder of a fresh lock and, once
// all are seen queued (and settle more), reads the sum of their CPU time
// from /proc, and again -wait-cpu later. Then the holder releases and all
// must exit 0; the seed's are stopped instead (at its 20 s poll they
// would take n polls to drain).
func (b *bench) queuedCPUOne(ctx context.Context, c *contender, n int) (cpu, waited time.Duration, err error) {
	queueLimit := time.Minute + time.Duration(n)*time.Second
	drainLimit := 30*time.Second + time.Duration(n)*time.Second
	ctx, cancel := context.WithTimeout(ctx, queueLimit+settle+b.cfg.waitCPU+drainLimit+time.Minute)
	defer cancel()
	dir, err := b.lockDir("h", c)
	if err != nil {
		return 0, 0, err
	}
	lock := filepath.Join(dir, "gpu.lock")
	name := fmt.Sprintf("h-%s-n%d", c.short, n)
	holder, err := b.startHolder(ctx, c, lock, name+"-holder.err", b.cfg.seedPoll)
	if err != nil {
		return 0, 0, err
	}
	defer holder.kill()
	bt, err := b.startBatch(ctx, c, name, n, false, func(int) ([]string, []string) {
		return b.waiterArgv(c, lock), b.envFor(c, b.cfg.seedPoll)
	})
	defer bt.kill()
	if err != nil {
		return 0, 0, err
	}
	if err := b.awaitAll(ctx, c, lock, bt, queueLimit); err != nil {
		return 0, 0, err
	}
	if !sleepCtx(ctx, settle) {
		return 0, 0, ctx.Err()
	}
	cpu0, err := bt.cpu()
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	if !sleepCtx(ctx, b.cfg.waitCPU) {
		return 0, 0, ctx.Err()
	}
	cpu1, err := bt.cpu()
	if err != nil {
		return 0, 0, err
	}
	cpu, waited = cpu1-cpu0, time.Since(t0)
	if c.kind == kSeed {
		for _, p := range bt.procs {
			p.signal(syscall.SIGTERM)
		}
		for _, p := range bt.procs {
			p.wait(10 * time.Second)
		}
		return cpu, waited, release(holder)
	}
	if err := release(holder); err != nil {
		return 0, 0, fmt.Errorf("holder: %v", err)
	}
	deadline := time.Now().Add(drainLimit)
	var errs []string
	for i, p := range bt.procs {
		if err := p.wait(max(time.Until(deadline), 100*time.Millisecond)); err != nil {
			errs = append(errs, fmt.Sprintf("waiter %d: %v%s", i, err, bt.stderr(i)))
		}
	}
	if len(errs) > 0 {
		if len(errs) > 5 {
			errs = append(errs[:5], fmt.Sprintf("and %d more", len(errs)-5))
		}
		return 0, 0, fmt.Errorf("after the release: %s", strings.Join(errs, "\n"))
	}
	return cpu, waited, nil
}

// cpu is the sum of the waiters' utime+stime; all must still be waiting.
func (bt *batch) cpu() (time.Duration, error) {
	var sum time.Duration
	for i, p := range bt.procs {
		select {
		case <-p.done:
			return 0, fmt.Errorf("waiter %d (%s) exited while queued: %v%s", i, p.name(), p.err, bt.stderr(i))
		default:
		}
		t, err := cpuTime(p.pid())
		if err != nil {
			return 0, fmt.Errorf("waiter %d: %v", i, err)
		}
		sum += t
	}
	return sum, nil
}
