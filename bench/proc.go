//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type kind int

const (
	kGpuexec kind = iota
	kFlock
	kSeed
)

// contender is one lock measured, and what was measured of it.
type contender struct {
	kind    kind
	name    string // column heading
	short   string // in file names
	bin     string // gpuexec, flock or node
	script  string // seedlock.cjs
	missing string // why it is N/A

	errs map[byte]string // failed measurements

	overhead []time.Duration // a

	gaps               []time.Duration // b
	handoffs, unqueued int             // b: consecutive sections with / without a queued waiter
	cycleCPU           time.Duration   // b: CPU of the loops, their wrappers and sections
	cycles             int             // b: sections whose CPU cycleCPU counts

	sections, overlaps int // c, over b and f

	cpu, waited  time.Duration // d
	rssKB, hwmKB int64         // e

	fifoKept, fifoRounds int // f

	chainGaps                                 []time.Duration // g
	chainSections, chainOverlaps, chainRounds int             // g

	queuedCPU map[int]waitersCPU // h, by number of waiters
}

// wrap is the argv running child while holding lock: gpuexec with its
// default flags (--poll spelled out) or flock(1). Not for the seed.
func (c *contender) wrap(lock string, child ...string) []string {
	if c.kind == kFlock {
		return append([]string{c.bin, lock}, child...)
	}
	return append([]string{c.bin, "--lock", lock, "--poll", "20s", "--"}, child...)
}

// seedRun is the seed tool's run mode: queue, print "ready PID TOKEN MS",
// hold holdMs ("-": until stdin closes), release, print "released MS".
// With truth, the hold creates and removes truth ('wx') and prints
// "overlap ..." and exits 3 when another holder is inside.
func (c *contender) seedRun(lock, slug, holdMs, truth string) []string {
	argv := []string{c.bin, c.script, "run", lock, "bench", slug, holdMs}
	if truth != "" {
		argv = append(argv, truth)
	}
	return argv
}

// overheadArgv is the uncontended wrapper around true; for the seed, its
// run mode holding 0 ms (there is no child to run).
func (b *bench) overheadArgv(c *contender, lock string) []string {
	if c.kind == kSeed {
		return c.seedRun(lock, "overhead", "0", "")
	}
	return c.wrap(lock, b.truePath)
}

// holderArgv holds the lock until its stdin closes, printing a line on
// stdout once it holds ("held" from the hold role, or the seed's "ready").
// Its environment needs roleEnv=hold.
func (b *bench) holderArgv(c *contender, lock string) []string {
	if c.kind == kSeed {
		return c.seedRun(lock, "holder", "-", "")
	}
	return c.wrap(lock, b.self)
}

// waiterArgv queues for the lock and then runs true.
func (b *bench) waiterArgv(c *contender, lock string) []string {
	if c.kind == kSeed {
		return c.seedRun(lock, "waiter", "0", "")
	}
	return c.wrap(lock, b.truePath)
}

// sectionArgv queues, then runs one critical section (the critical role,
// or the seed's hold with a truth file). For the critical role its
// environment needs roleEnv=critical (the loop role sets it) and
// sectionEnv.
func (b *bench) sectionArgv(c *contender, lock, truth, slug string) []string {
	if c.kind == kSeed {
		return c.seedRun(lock, slug, strconv.FormatInt(b.cfg.hold.Milliseconds(), 10), truth)
	}
	return c.wrap(lock, b.self)
}

// envFor is the environment for c's processes: the base environment, the
// seed's poll, then extra.
func (b *bench) envFor(c *contender, seedPoll time.Duration, extra ...string) []string {
	env := append([]string(nil), b.env...)
	if c.kind == kSeed {
		env = append(env, fmt.Sprintf("SEEDLOCK_POLL_MS=%d", seedPoll.Milliseconds()))
	}
	return append(env, extra...)
}

// sectionEnv is the critical role's environment.
func (b *bench) sectionEnv(truth, tag string) []string {
	return []string{truthEnv + "=" + truth, holdEnv + "=" + b.cfg.hold.String(), tagEnv + "=" + tag}
}

// lockDir makes a fresh folder for one lock, named after the measurement
// and the contender: each lock has a folder of its own, so that what
// happens beside it (logs, other locks) does not wake gpuexec's watcher.
func (b *bench) lockDir(m string, c *contender) (string, error) {
	return os.MkdirTemp(b.dir, m+"-"+c.short+"-")
}

// logFile creates a file for a process's output in the logs folder.
func (b *bench) logFile(name string) (*os.File, error) {
	return os.OpenFile(filepath.Join(b.logs, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_EXCL, 0o644)
}

func command(argv, env []string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	return cmd
}

// exitCode is the exit status in err, -1 when there is none.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// proc is a process started by the benchmark.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	err   error
}

// start starts argv; ctx kills it. stdout and stderr may be files or
// *lines.
func start(ctx context.Context, argv, env []string, withStdin bool, stdout, stderr io.Writer) (*proc, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	p := &proc{cmd: cmd, done: make(chan struct{})}
	if withStdin {
		var err error
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) name() string { return filepath.Base(p.cmd.Path) }

// wait waits up to d for the process to exit and returns its error; after
// d it kills it.
func (p *proc) wait(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s (pid %d) still running after %s; killed", p.name(), p.pid(), d)
	}
}

// kill ends the process if it still runs, and reaps it.
func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Kill()
		<-p.done
	}
}

// lines is an io.Writer that keeps what is written as lines, for waiting
// on a process's first line and for error messages.
type lines struct {
	mu      sync.Mutex
	partial []byte
	got     []string
	changed chan struct{} // closed at each new line
}

func newLines() *lines { return &lines{changed: make(chan struct{})} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	added := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.got = append(l.got, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		added = true
	}
	if added {
		close(l.changed)
		l.changed = make(chan struct{})
	}
	return len(p), nil
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.got, "\n") + string(l.partial)
}

// first waits up to d for the first line; p is the writing process, whose
// exit ends the wait.
func (l *lines) first(ctx context.Context, p *proc, d time.Duration) (string, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	exited := p.done
	for {
		l.mu.Lock()
		if len(l.got) > 0 {
			s := l.got[0]
			l.mu.Unlock()
			return s, nil
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-exited:
			exited = nil // look once more, then wait only for the timer
			t.Reset(100 * time.Millisecond)
		case <-t.C:
			if exited == nil {
				return "", fmt.Errorf("%s exited (%v) before printing a line", p.name(), p.err)
			}
			return "", fmt.Errorf("%s printed no line in %s", p.name(), d)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return ""
	}
	if len(data) > 1500 {
		data = data[len(data)-1500:]
	}
	return "\n" + strings.TrimRight(string(data), "\n")
}

// cpuTime is the user+system CPU time of process pid, all threads, from
// /proc/PID/stat (fields 14 and 15, in clock ticks).
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no comm", pid)
	}
	f := bytes.Fields(data[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// userHZ is the clock tick of /proc/PID/stat (USER_HZ): 100 on every Linux
// architecture Go supports, whatever the kernel's own HZ.
const userHZ = 100

// memory is VmRSS and VmHWM (peak RSS) of process pid, in kB.
func memory(pid int) (rss, hwm int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss, _ = strconv.ParseInt(f[1], 10, 64)
		case "VmHWM:":
			hwm, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return rss, hwm, nil
}

// blockedInFlock reports whether process pid waits in flock(2).
func blockedInFlock(pid int) (bool, error) {
	blocked, err := flockWaiters()
	return blocked[pid], err
}

// flockWaiters is the set of processes waiting in flock(2): /proc/locks
// lists blocked requests as "N: -> FLOCK ADVISORY WRITE PID ...".
func flockWaiters() (map[int]bool, error) {
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return nil, err
	}
	out := map[int]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[1] == "->" && f[2] == "FLOCK" {
			if pid, err := strconv.Atoi(f[5]); err == nil {
				out[pid] = true
			}
		}
	}
	return out, nil
}

// queueLen is the length of the queue `gpuexec status --json` shows.
func (b *bench) queueLen(ctx context.Context, gpuexec, lock string) (int, error) {
	cmd := exec.CommandContext(ctx, gpuexec, "status", "--lock", lock, "--json")
	cmd.Env = b.env
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("gpuexec status: %v", err)
	}
	var st struct {
		Queue []json.RawMessage `json:"queue"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, fmt.Errorf("gpuexec status --json: %v: %s", err, out)
	}
	return len(st.Queue), nil
}

// awaitQueued waits until waiter p is visibly queued: for gpuexec, the
// queue status shows holds n waiters; for flock(1), p is blocked in
// flock(2); for the seed, p logged its first "waiting" line (on stderr,
// seen by errl) after its first failed try.
func (b *bench) awaitQueued(ctx context.Context, c *contender, lock string, p *proc, errl *lines, n int) error {
	const limit = 20 * time.Second
	if c.kind == kSeed {
		_, err := errl.first(ctx, p, limit)
		return err
	}
	deadline := time.Now().Add(limit)
	for {
		var ok bool
		var err error
		if c.kind == kGpuexec {
			var q int
			q, err = b.queueLen(ctx, c.bin, lock)
			ok = q >= n
		} else {
			ok, err = blockedInFlock(p.pid())
		}
		if err != nil || ok {
			return err
		}
		select {
		case <-p.done:
			return fmt.Errorf("waiter %s exited before it was queued: %v", p.name(), p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiter %s (pid %d) not seen queued after %s", p.name(), p.pid(), limit)
		}
	}
}

// startHolder starts a holder of lock and waits until it holds. Release it
// by closing its stdin.
func (b *bench) startHolder(ctx context.Context, c *contender, lock, logName string, seedPoll time.Duration) (*proc, error) {
	errf, err := b.logFile(logName)
	if err != nil {
		return nil, err
	}
	defer errf.Close()
	out := newLines()
	p, err := start(ctx, b.holderArgv(c, lock), b.envFor(c, seedPoll, roleEnv+"=hold"), true, out, errf)
	if err != nil {
		return nil, err
	}
	if _, err := out.first(ctx, p, 20*time.Second); err != nil {
		p.kill()
		return nil, fmt.Errorf("holder: %v%s", err, tail(errf.Name()))
	}
	return p, nil
}

// release closes a holder's stdin and waits for it to exit.
func release(p *proc) error {
	p.stdin.Close()
	return p.wait(20 * time.Second)
}

// sleepCtx sleeps d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// signal sends sig to p.
func (p *proc) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }
