//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// overhead is (a): each contender's uncontended wrapper around true, and
// true alone, run by run in rotating order, so that noise hits all alike.
func (b *bench) overhead(ctx context.Context) {
	type entry struct {
		c      *contender // nil: a reference (true alone, the floor)
		argv   []string
		env    []string
		stderr string
		refs   *[]time.Duration
		// optional: a reference whose failure drops it (its runs so
		// far too), not the whole of (a).
		optional bool
		dropped  bool
	}
	entries := []*entry{
		{argv: []string{b.truePath}, env: b.env, stderr: filepath.Join(b.logs, "a-true.err"), refs: &b.bare},
		{argv: []string{b.floorBin, b.truePath}, env: b.env, stderr: filepath.Join(b.logs, "a-floor.err"), refs: &b.floor},
	}
	if dir, err := os.MkdirTemp(b.dir, "a-floor-"); err != nil {
		b.logf("(a) floor -lock: %v", err)
	} else {
		entries = append(entries, &entry{argv: []string{b.floorBin, "-lock", filepath.Join(dir, "gpu.lock"), b.truePath},
			env: b.env, stderr: filepath.Join(b.logs, "a-floor-lock.err"), refs: &b.lockedFloor, optional: true})
	}
	for _, c := range b.available() {
		dir, err := b.lockDir("a", c)
		if err != nil {
			b.fail(c, 'a', err)
			continue
		}
		entries = append(entries, &entry{c: c, argv: b.overheadArgv(c, filepath.Join(dir, "gpu.lock")),
			env: b.envFor(c, b.cfg.seedHandoffPoll), stderr: filepath.Join(b.logs, "a-"+c.short+".err")})
	}
	runs := b.cfg.runs
	b.logf("(a) overhead: %d runs of each of %d commands, interleaved", runs, len(entries))
	for i := range runs {
		if ctx.Err() != nil {
			return
		}
		for j := range entries {
			e := entries[(i+j)%len(entries)]
			if e.c != nil && e.c.errs['a'] != "" || e.dropped {
				continue
			}
			d, err := timed(ctx, e.argv, e.env, e.stderr)
			switch {
			case err != nil && e.optional:
				b.logf("(a) %s: %v; left out", strings.Join(e.argv[:2], " "), err)
				e.dropped, *e.refs = true, nil
			case err != nil && e.c == nil:
				b.logf("(a) %s: %v", filepath.Base(e.argv[0]), err)
				b.failed = true
				return
			case err != nil:
				b.fail(e.c, 'a', err)
			case e.c == nil:
				*e.refs = append(*e.refs, d)
			default:
				e.c.overhead = append(e.c.overhead, d)
			}
		}
		if (i+1)%max(1, runs/4) == 0 && i+1 < runs {
			b.logf("(a) %d/%d", i+1, runs)
		}
	}
}

// timed runs argv once and returns its wall time.
func timed(ctx context.Context, argv, env []string, stderrPath string) (time.Duration, error) {
	f, err := os.OpenFile(stderrPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t0 := time.Now()
	p, err := start(ctx, argv, env, false, nil, f)
	if err != nil {
		return 0, err
	}
	<-p.done
	d := time.Since(t0)
	if p.err != nil {
		return 0, fmt.Errorf("%s: %v%s", strings.Join(argv, " "), p.err, tail(stderrPath))
	}
	return d, nil
}

// section is one critical section as logged. Times are Unix ns.
type section struct {
	spawn      int64 // when its wrapper was started; 0 if not known
	start, end int64
	overlap    bool
	tag        string
}

// parseSections reads a log written by the loop role, the critical role or
// the seed's run mode: "spawn CYCLE NS", "section START END ok|overlap TAG",
// "ready PID TOKEN MS", "released MS", "overlap ...", "exit CYCLE CODE".
func parseSections(path string) ([]section, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var (
		out   []section
		cur   *section
		spawn int64
	)
	flush := func() {
		if cur != nil {
			if cur.end == 0 {
				cur.end = cur.start // an overlap ended the seed's hold
			}
			out = append(out, *cur)
			cur = nil
		}
	}
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "spawn" && len(f) == 3:
			flush()
			spawn = num(f[2])
		case f[0] == "section" && len(f) == 5:
			flush()
			cur = &section{spawn: spawn, start: num(f[1]), end: num(f[2]), overlap: f[3] == "overlap", tag: f[4]}
			spawn = 0
		case f[0] == "ready" && len(f) == 4:
			flush()
			cur = &section{spawn: spawn, start: num(f[3]) * 1e6, tag: f[1]}
			spawn = 0
		case f[0] == "released" && len(f) == 2 && cur != nil:
			cur.end = num(f[1]) * 1e6
		case f[0] == "overlap":
			if cur == nil {
				cur = &section{spawn: spawn}
			}
			cur.overlap = true
		case f[0] == "exit" && len(f) == 3 && f[2] != "3":
			return out, fmt.Errorf("%s: cycle %s exited %s", filepath.Base(path), f[1], f[2])
		}
	}
	flush()
	return out, nil
}

// analyze sorts sections by start and returns the handoff gaps (a section's
// start minus the previous one's end, where its wrapper was started before
// the previous section began: a waiter was queued), how many consecutive
// pairs had no waiter queued, and how many sections overlapped another (the
// truth-file check failed, or it started before an earlier one ended).
func analyze(secs []section) (gaps []time.Duration, unqueued, overlaps int) {
	slices.SortFunc(secs, func(x, y section) int { return cmpInt(x.start, y.start) })
	var maxEnd int64
	for i, s := range secs {
		over := s.overlap || (i > 0 && s.start < maxEnd)
		if over {
			overlaps++
		}
		if i > 0 && !over {
			if p := secs[i-1]; s.spawn != 0 && s.spawn <= p.start {
				gaps = append(gaps, time.Duration(s.start-p.end))
			} else {
				unqueued++
			}
		}
		maxEnd = max(maxEnd, s.end)
	}
	return gaps, unqueued, overlaps
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// handoffRounds splits (b) into rounds of about five cycles per contender,
// the contenders taking turns, so that a noisy stretch of the machine does
// not fall on one of them only.
func handoffRounds(cycles int) int { return max(1, min(5, cycles/5)) }

// handoff is (b) and (c).
func (b *bench) handoff(ctx context.Context) {
	cs := b.available()
	rounds := handoffRounds(b.cfg.cycles)
	b.logf("(b) handoff: %d contenders x %d cycles holding %s, in %d round(s); seed poll %s",
		b.cfg.contenders, b.cfg.cycles, b.cfg.hold, rounds, b.cfg.seedHandoffPoll)
	for r := range rounds {
		n := b.cfg.cycles / rounds
		if r < b.cfg.cycles%rounds {
			n++
		}
		for j := range cs {
			c := cs[(r+j)%len(cs)]
			if c.errs['b'] != "" || ctx.Err() != nil {
				continue
			}
			t0 := time.Now()
			secs, err := b.handoffRound(ctx, c, r, n)
			if err != nil {
				b.fail(c, 'b', err)
				continue
			}
			gaps, unqueued, overlaps := analyze(secs)
			c.gaps = append(c.gaps, gaps...)
			c.handoffs += len(gaps)
			c.unqueued += unqueued
			c.sections += len(secs)
			c.cycles += len(secs)
			c.overlaps += overlaps
			b.logf("(b) round %d/%d %s: %d sections in %s, %d handoffs, %d overlaps",
				r+1, rounds, c.name, len(secs), time.Since(t0).Round(10*time.Millisecond), len(gaps), overlaps)
		}
	}
}

// handoffRound runs the contenders' loop processes, cycles each, on one
// lock and returns all their sections.
func (b *bench) handoffRound(ctx context.Context, c *contender, round, cycles int) ([]section, error) {
	dir, err := b.lockDir("b", c)
	if err != nil {
		return nil, err
	}
	lock := filepath.Join(dir, "gpu.lock")
	truth := filepath.Join(b.dir, filepath.Base(dir)+".truth")
	perCycle := b.cfg.hold + 2*time.Second
	if c.kind == kSeed {
		perCycle += 2 * b.cfg.seedHandoffPoll
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(b.cfg.contenders*cycles)*perCycle+time.Minute)
	defer cancel()
	var (
		procs []*proc
		outs  []string
	)
	defer func() {
		for _, p := range procs {
			p.kill()
		}
	}()
	for k := range b.cfg.contenders {
		name := fmt.Sprintf("b-%s-r%d-%d", c.short, round, k)
		out, err := b.logFile(name + ".out")
		if err != nil {
			return nil, err
		}
		errf, err := b.logFile(name + ".err")
		if err != nil {
			out.Close()
			return nil, err
		}
		argv := append([]string{b.self, strconv.Itoa(cycles)}, b.sectionArgv(c, lock, truth, fmt.Sprintf("c%d", k))...)
		env := b.envFor(c, b.cfg.seedHandoffPoll, append(b.sectionEnv(truth, strconv.Itoa(k)), roleEnv+"=loop")...)
		p, err := start(ctx, argv, env, false, out, errf)
		out.Close()
		errf.Close()
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		outs = append(outs, out.Name())
	}
	var errs []string
	for k, p := range procs {
		<-p.done
		if p.err != nil {
			errs = append(errs, fmt.Sprintf("loop %d: %v%s", k, p.err, tail(strings.TrimSuffix(outs[k], ".out")+".err")))
		}
		// A loop's rusage counts what it reaped: every wrapper it ran
		// and, through them, their children.
		if st := p.cmd.ProcessState; st != nil {
			c.cycleCPU += st.UserTime() + st.SystemTime()
		}
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err().Error())
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	var all []section
	for _, o := range outs {
		secs, err := parseSections(o)
		if err != nil {
			return nil, err
		}
		all = append(all, secs...)
	}
	if want := b.cfg.contenders * cycles; len(all) != want {
		return nil, fmt.Errorf("%d critical sections logged, want %d", len(all), want)
	}
	return all, nil
}

// holdAndWait is (d) and (e), for all contenders at once, each on its own
// lock: a holder holds; for (d) one waiter queues behind it and its CPU
// time is read from /proc when it is seen queued and -wait-cpu later; for
// (e) the holder's VmRSS and VmHWM are read while its child runs, at the
// end of the wait.
func (b *bench) holdAndWait(ctx context.Context) {
	wait := b.cfg.waitCPU
	if !b.cfg.sel['d'] {
		wait = time.Second // let the holder settle before reading its memory
	}
	b.logf("(d, e) a holder and one waiter each, %s of waiting; seed poll %s", wait, b.cfg.seedPoll)
	var wg sync.WaitGroup
	for _, c := range b.available() {
		wg.Go(func() {
			if err := b.holdAndWaitOne(ctx, c, wait); err != nil {
				if b.cfg.sel['d'] {
					b.fail(c, 'd', err)
				}
				if b.cfg.sel['e'] && c.rssKB == 0 {
					b.fail(c, 'e', err)
				}
			}
		})
	}
	wg.Wait()
}

func (b *bench) holdAndWaitOne(ctx context.Context, c *contender, wait time.Duration) error {
	dir, err := b.lockDir("d", c)
	if err != nil {
		return err
	}
	lock := filepath.Join(dir, "gpu.lock")
	holder, err := b.startHolder(ctx, c, lock, "d-"+c.short+"-holder.err", b.cfg.seedPoll)
	if err != nil {
		return err
	}
	defer holder.kill()
	var waiter *proc
	if b.cfg.sel['d'] {
		errf, err := b.logFile("d-" + c.short + "-waiter.err")
		if err != nil {
			return err
		}
		defer errf.Close()
		errl := newLines()
		var stderr io.Writer = errf
		if c.kind == kSeed {
			stderr = errl
		}
		waiter, err = start(ctx, b.waiterArgv(c, lock), b.envFor(c, b.cfg.seedPoll), false, nil, stderr)
		if err != nil {
			return err
		}
		defer waiter.kill()
		if err := b.awaitQueued(ctx, c, lock, waiter, errl, 1); err != nil {
			return err
		}
	}
	var cpu0 time.Duration
	t0 := time.Now()
	if waiter != nil {
		if cpu0, err = cpuTime(waiter.pid()); err != nil {
			return err
		}
	}
	if !sleepCtx(ctx, wait) {
		return ctx.Err()
	}
	if waiter != nil {
		cpu1, err := cpuTime(waiter.pid())
		if err != nil {
			return err
		}
		c.cpu, c.waited = cpu1-cpu0, time.Since(t0)
		// The waiter is done: stop it before the holder lets go, or the
		// seed's would wait out its poll.
		waiter.signal(syscall.SIGTERM)
		waiter.wait(10 * time.Second)
	}
	if c.rssKB, c.hwmKB, err = memory(holder.pid()); err != nil {
		return err
	}
	return release(holder)
}

// fifo is (f), contender by contender.
func (b *bench) fifo(ctx context.Context) {
	b.logf("(f) FIFO: %d rounds of %d waiters; seed poll %s", b.cfg.fifoRounds, b.cfg.fifoWaiters, b.cfg.seedHandoffPoll)
	for _, c := range b.available() {
		t0 := time.Now()
		for r := range b.cfg.fifoRounds {
			if ctx.Err() != nil {
				return
			}
			secs, err := b.fifoRound(ctx, c, r)
			if err != nil {
				b.fail(c, 'f', err)
				break
			}
			_, _, overlaps := analyze(secs) // sorts by start
			c.sections += len(secs)
			c.overlaps += overlaps
			c.fifoRounds++
			if slices.IsSortedFunc(secs, func(x, y section) int { return strings.Compare(x.tag, y.tag) }) {
				c.fifoKept++
			}
		}
		b.logf("(f) %s: arrival order kept %d/%d, in %s", c.name, c.fifoKept, c.fifoRounds, time.Since(t0).Round(10*time.Millisecond))
	}
}

// fifoRound queues the waiters behind a holder one after another, each
// once the previous is visibly queued, releases the holder, and returns
// the waiters' sections, each tagged with its arrival number (zero-padded,
// so that arrival order is tag order).
func (b *bench) fifoRound(ctx context.Context, c *contender, round int) ([]section, error) {
	n := b.cfg.fifoWaiters
	ctx, cancel := context.WithTimeout(ctx, time.Duration(n)*(20*time.Second+2*b.cfg.seedHandoffPoll))
	defer cancel()
	dir, err := b.lockDir("f", c)
	if err != nil {
		return nil, err
	}
	lock := filepath.Join(dir, "gpu.lock")
	truth := filepath.Join(b.dir, filepath.Base(dir)+".truth")
	name := fmt.Sprintf("f-%s-r%d", c.short, round)
	holder, err := b.startHolder(ctx, c, lock, name+"-holder.err", b.cfg.seedHandoffPoll)
	if err != nil {
		return nil, err
	}
	defer holder.kill()
	var (
		waiters []*proc
		outs    []string
	)
	defer func() {
		for _, w := range waiters {
			w.kill()
		}
	}()
	for i := range n {
		out, err := b.logFile(fmt.Sprintf("%s-%d.out", name, i))
		if err != nil {
			return nil, err
		}
		errl := newLines()
		tag := fmt.Sprintf("%03d", i)
		env := b.envFor(c, b.cfg.seedHandoffPoll, append(b.sectionEnv(truth, tag), roleEnv+"=critical")...)
		w, err := start(ctx, b.sectionArgv(c, lock, truth, "w"+tag), env, false, out, errl)
		out.Close()
		if err != nil {
			return nil, err
		}
		waiters = append(waiters, w)
		outs = append(outs, out.Name())
		if err := b.awaitQueued(ctx, c, lock, w, errl, i+1); err != nil {
			return nil, fmt.Errorf("waiter %d: %v\n%s", i, err, errl)
		}
	}
	if err := release(holder); err != nil {
		return nil, fmt.Errorf("holder: %v", err)
	}
	var secs []section
	for i, w := range waiters {
		<-w.done
		if w.err != nil {
			return nil, fmt.Errorf("waiter %d: %v%s", i, w.err, tail(outs[i]))
		}
		s, err := parseSections(outs[i])
		if err != nil {
			return nil, err
		}
		if len(s) != 1 {
			return nil, fmt.Errorf("waiter %d logged %d sections, want 1", i, len(s))
		}
		s[0].tag = fmt.Sprintf("%03d", i)
		secs = append(secs, s[0])
	}
	return secs, ctx.Err()
}
