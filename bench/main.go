//go:build linux

package main

import (
	"context"
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// modulePath is the module whose gpuexec is measured.
const modulePath = "github.com/gpuexec/gpuexec"

func main() {
	if isFakeSMI() {
		os.Exit(fakeSMI(os.Args[1:]))
	}
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role, os.Args[1:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	runs, contenders, cycles, fifoRounds, fifoWaiters int
	chainWaiters, chainRounds                         int
	hold, waitCPU, seedPoll, seedHandoffPoll          time.Duration
	chainHold                                         time.Duration
	cpuWaiters                                        []int
	sel                                               map[byte]bool
	gpuexec, tags, ldflags, root                      string
	keep                                              bool
	args                                              []string

	// (i)
	dayScale, dayTimeoutFactor      float64
	dayGap, dayKillAfter, daySample time.Duration
	daySeed                         uint64
	dayChart                        string
	dayPolicies                     map[dayPolicy]bool
	dayVariants                     map[int]bool
}

const usageHead = `usage: go run ./bench [flags]

Measures gpuexec against flock(1) and the seed's polling Node lock, side by
side, and prints a Markdown table (stdout; progress on stderr):
  a  wrapper overhead, uncontended (gpuexec --lock L -- true, flock L true)
  b  handoff gap between critical sections of contending loop processes
  c  overlapping critical sections in b and f (must be 0)
  d  CPU used by one queued waiter over -wait-cpu
  e  RSS of the wrapper while its child runs
  f  FIFO: is the arrival order of queued waiters kept?
  g  handoff gap along a chain of waiters queued at once behind a holder
  h  CPU used by 1, 10 and 100 queued waiters together over -wait-cpu
  i  a day of 34 jobs on a fake 24 GiB card: makespan, utilisation, waits
     and over-commit under flock(1), gpuexec whole card, --share --vram and
     --share --vram --timeout (only when named: -only i; about 2 minutes
     at -day-scale 100)
gpuexec is built from the module root (go build .) unless -gpuexec is given.
The seed polls: its handoff gap scales with its poll, set by -seed-poll (d)
and -seed-handoff-poll (b, f, g).

flags:
`

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{args: args}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHead)
		fs.PrintDefaults()
	}
	var only, cpuWaiters string
	var quick bool
	fs.IntVar(&c.runs, "runs", 200, "(a) runs per contender, interleaved")
	fs.IntVar(&c.contenders, "contenders", 8, "(b) contending loop processes")
	fs.IntVar(&c.cycles, "cycles", 25, "(b) critical sections per contender")
	fs.DurationVar(&c.hold, "hold", 5*time.Millisecond, "(b, f) how long a critical section holds the lock (whole ms)")
	fs.DurationVar(&c.waitCPU, "wait-cpu", 30*time.Second, "(d, h) how long the waiters' CPU is measured")
	fs.IntVar(&c.fifoRounds, "fifo-rounds", 10, "(f) rounds")
	fs.IntVar(&c.fifoWaiters, "fifo-waiters", 8, "(f) waiters queued per round")
	fs.IntVar(&c.chainWaiters, "chain-waiters", 16, "(g) waiters started at once behind the holder, per round")
	fs.DurationVar(&c.chainHold, "chain-hold", 150*time.Millisecond, "(g) how long each waiter's critical section holds the lock (whole ms)")
	fs.IntVar(&c.chainRounds, "chain-rounds", 3, "(g) rounds, pooled")
	fs.StringVar(&cpuWaiters, "cpu-waiters", "1,10,100", "(h) numbers of queued waiters whose CPU is measured, comma-separated")
	fs.DurationVar(&c.seedPoll, "seed-poll", 20*time.Second, "(d) the seed's poll, SEEDLOCK_POLL_MS (the seed's own is 20s)")
	fs.DurationVar(&c.seedHandoffPoll, "seed-handoff-poll", 500*time.Millisecond, "(b, f, g) the seed's poll; a poller's handoff gap scales with it")
	fs.StringVar(&only, "only", "", "run only these measurements, comma-separated: a,b,c,d,e,f,g,h,i (c counts overlaps in b and f; without f it runs b); default a-h (i only when named)")
	var dayPolicies, dayVariants string
	var daySeed int64
	fs.Float64Var(&c.dayScale, "day-scale", 100, "(i) divide the jobs' durations (30s, 60s, 180s) by this")
	fs.DurationVar(&c.dayGap, "day-gap", 20*time.Millisecond, "(i) time between two arrivals in the fixed shuffled order")
	fs.Int64Var(&daySeed, "day-seed", 1, "(i) seed of the shuffled order and of the random arrivals")
	fs.Float64Var(&c.dayTimeoutFactor, "day-timeout-factor", 1.2, "(i) --timeout of the share + timeout policy: the job's scaled duration times this")
	fs.DurationVar(&c.dayKillAfter, "day-kill-after", 50*time.Millisecond, "(i) --kill-after of the share + timeout policy")
	fs.DurationVar(&c.daySample, "day-sample", 5*time.Millisecond, "(i) how often the sampler reads the jobs' registry")
	fs.StringVar(&c.dayChart, "day-chart", "", "(i) write an SVG bar chart of the makespans to `FILE`")
	fs.StringVar(&dayPolicies, "day-policies", "flock,whole,share,timeout", "(i) policies run, comma-separated: flock,whole,share,timeout; none: only the simulated table")
	fs.StringVar(&dayVariants, "day-arrivals", "fixed,random", "(i) variants of arrivals run, comma-separated: fixed,random")
	fs.StringVar(&c.gpuexec, "gpuexec", "", "measure this gpuexec `binary` instead of building one")
	fs.StringVar(&c.tags, "tags", "urfave_cli_no_docs", "build gpuexec with go build -tags `TAGS` (default: the release build of README)")
	fs.StringVar(&c.ldflags, "ldflags", "-s -w", "build gpuexec with go build -ldflags `FLAGS` (default: the release build of README)")
	fs.StringVar(&c.root, "root", "", "the gpuexec module `folder` (default: found upward from the current folder)")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary folder (its path goes to stderr)")
	fs.BoolVar(&quick, "quick", false, "smoke test: -runs 10 -contenders 2 -cycles 3 -wait-cpu 2s -fifo-rounds 2 -chain-waiters 4 -chain-rounds 1 -chain-hold 50ms -cpu-waiters 1,10, unless given")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range map[string]string{"runs": "10", "contenders": "2", "cycles": "3", "wait-cpu": "2s", "fifo-rounds": "2",
			"chain-waiters": "4", "chain-rounds": "1", "chain-hold": "50ms", "cpu-waiters": "1,10"} {
			if !set[name] {
				fs.Set(name, v)
			}
		}
	}
	switch {
	case c.runs < 1, c.cycles < 1, c.fifoRounds < 1, c.chainRounds < 1:
		return nil, errors.New("-runs, -cycles, -fifo-rounds and -chain-rounds must be at least 1")
	case c.contenders < 2, c.fifoWaiters < 2, c.chainWaiters < 2:
		return nil, errors.New("-contenders, -fifo-waiters and -chain-waiters must be at least 2")
	case c.hold < 0 || c.hold%time.Millisecond != 0, c.chainHold < 0 || c.chainHold%time.Millisecond != 0:
		return nil, errors.New("-hold and -chain-hold must be whole numbers of milliseconds")
	case c.waitCPU <= 0, c.seedPoll < time.Millisecond, c.seedHandoffPoll < time.Millisecond:
		return nil, errors.New("-wait-cpu, -seed-poll and -seed-handoff-poll must be positive (the polls at least 1ms)")
	}
	for _, s := range strings.Split(cpuWaiters, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-cpu-waiters: %q is not a number of waiters (at least 1)", s)
		}
		if !slices.Contains(c.cpuWaiters, n) {
			c.cpuWaiters = append(c.cpuWaiters, n)
		}
	}
	switch {
	case c.dayScale <= 0 || math.IsInf(c.dayScale, 0) || math.IsNaN(c.dayScale):
		return nil, errors.New("-day-scale must be positive")
	case c.dayGap < 0, c.dayKillAfter < 0, c.daySample <= 0:
		return nil, errors.New("-day-gap and -day-kill-after must not be negative, -day-sample must be positive")
	case c.dayTimeoutFactor <= 0:
		return nil, errors.New("-day-timeout-factor must be positive")
	case daySeed < 0:
		return nil, errors.New("-day-seed must not be negative")
	}
	c.daySeed = uint64(daySeed)
	c.dayPolicies = map[dayPolicy]bool{}
	for _, s := range strings.Split(dayPolicies, ",") {
		if strings.TrimSpace(s) == "none" && strings.TrimSpace(dayPolicies) == "none" {
			break // the simulated table only
		}
		i := slices.IndexFunc(dayPolicyNames, func(n struct{ flag, name string }) bool { return n.flag == strings.TrimSpace(s) })
		if i < 0 {
			return nil, fmt.Errorf("-day-policies: %q is not one of flock,whole,share,timeout", s)
		}
		c.dayPolicies[dayPolicy(i)] = true
	}
	c.dayVariants = map[int]bool{}
	for _, s := range strings.Split(dayVariants, ",") {
		i := slices.IndexFunc(dayVariantNames, func(n struct{ flag, name string }) bool { return n.flag == strings.TrimSpace(s) })
		if i < 0 {
			return nil, fmt.Errorf("-day-arrivals: %q is not one of fixed,random", s)
		}
		c.dayVariants[i] = true
	}
	c.sel = map[byte]bool{}
	if only == "" {
		only = "a,b,c,d,e,f,g,h"
	}
	for _, s := range strings.Split(only, ",") {
		s = strings.TrimSpace(s)
		if len(s) != 1 || s[0] < 'a' || s[0] > 'i' {
			return nil, fmt.Errorf("-only: %q is not one of a,b,c,d,e,f,g,h,i", s)
		}
		c.sel[s[0]] = true
	}
	if c.sel['c'] && !c.sel['f'] {
		c.sel['b'] = true
	}
	return c, nil
}

// bench is one run of the benchmark.
type bench struct {
	cfg         *config
	dir         string // the temporary folder
	logs        string // dir/logs: outputs of every process
	progress    io.Writer
	pmu         sync.Mutex
	self        string // this program, for the roles
	root        string
	truePath    string
	env         []string // os.Environ without GPUEXEC_, SEEDLOCK_ and BENCH_ variables
	cs          []*contender
	bare        []time.Duration // (a): true alone, for reference
	floorBin    string          // (a): bench/floor, built like gpuexec
	floor       []time.Duration // (a): floor true, for reference
	lockedFloor []time.Duration // (a): floor -lock L true, for reference
	load        string          // the 1-minute load average at start
	gpuexec     gpuexecInfo
	failed      bool

	// (i)
	dayLoad     string // the 1-minute load average at its start
	dayLB       time.Duration
	dayArrivals [][]arrival // by variant
	dayRuns     []*dayRun
	daySim      []simRow // the same day simulated with no overhead
	dayErr      string   // why it was not measured at all
}

type gpuexecInfo struct {
	size      int64
	goVersion string
	rev       string
	built     bool
}

func (b *bench) logf(format string, a ...any) {
	b.pmu.Lock()
	defer b.pmu.Unlock()
	fmt.Fprintf(b.progress, "bench: "+format+"\n", a...)
}

// fail reports a measurement that failed for c; the table shows "error" and
// the exit status is 1.
func (b *bench) fail(c *contender, m byte, err error) {
	b.pmu.Lock()
	c.errs[m] = err.Error()
	b.failed = true
	b.pmu.Unlock()
	b.logf("(%c) %s: %v", m, c.name, err)
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v (see -h)\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "gpuexec-bench-")
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	if cfg.keep {
		fmt.Fprintf(stderr, "bench: keeping %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	b := &bench{cfg: cfg, dir: dir, logs: filepath.Join(dir, "logs"), progress: stderr}
	if err := b.setup(ctx); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	start := time.Now()
	sel := cfg.sel
	if sel['a'] {
		b.overhead(ctx)
	}
	if sel['b'] {
		b.handoff(ctx)
	}
	if sel['d'] || sel['e'] {
		b.holdAndWait(ctx)
	}
	if sel['f'] {
		b.fifo(ctx)
	}
	if sel['g'] {
		b.chain(ctx)
	}
	if sel['h'] {
		b.queuedCPU(ctx)
	}
	if sel['i'] {
		b.day(ctx)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "bench: interrupted")
		return 130
	}
	b.logf("done in %s", time.Since(start).Round(100*time.Millisecond))
	b.report(stdout)
	if b.failed {
		return 1
	}
	return 0
}

// setup finds the tools, builds gpuexec and describes the contenders.
func (b *bench) setup(ctx context.Context) error {
	b.load = loadAvg()
	var err error
	if err = os.Mkdir(b.logs, 0o755); err != nil {
		return err
	}
	if b.self, err = os.Executable(); err != nil {
		return err
	}
	if b.truePath, err = exec.LookPath("true"); err != nil {
		return err
	}
	for _, kv := range os.Environ() {
		k := strings.ToUpper(kv)
		if strings.HasPrefix(k, "GPUEXEC_") || strings.HasPrefix(k, "SEEDLOCK_") || strings.HasPrefix(k, "BENCH_") {
			continue
		}
		b.env = append(b.env, kv)
	}
	b.root = b.cfg.root
	if b.root == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		if b.root, err = findRoot(wd); err != nil {
			return err
		}
	}
	gx := &contender{kind: kGpuexec, name: "gpuexec", short: "gpuexec"}
	if gx.bin, err = b.buildGpuexec(ctx); err != nil {
		return err
	}
	b.gpuexec.built = b.cfg.gpuexec == ""
	if fi, err := os.Stat(gx.bin); err == nil {
		b.gpuexec.size = fi.Size()
	}
	if bi, err := buildinfo.ReadFile(gx.bin); err == nil {
		b.gpuexec.goVersion = bi.GoVersion
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" && modified == "true" {
			rev += " with uncommitted changes"
		}
		b.gpuexec.rev = rev
	}
	if b.gpuexec.rev == "" && b.gpuexec.built {
		b.gpuexec.rev = gitRev(b.root) // built with -buildvcs=false
	}
	if b.cfg.sel['a'] {
		// Built like gpuexec, from the same module and go.sum.
		if b.floorBin, err = b.build(ctx, "floor", "./bench/floor"); err != nil {
			return err
		}
	}
	fl := &contender{kind: kFlock, name: "flock(1)", short: "flock"}
	if fl.bin, err = exec.LookPath("flock"); err != nil {
		fl.missing = "no flock(1) on PATH"
	}
	sd := &contender{kind: kSeed, name: "seed (Node)", short: "seed", script: filepath.Join(b.root, "lock", "testdata", "seedlock.cjs")}
	if sd.bin, err = exec.LookPath("node"); err != nil {
		sd.missing = "no node on PATH"
	} else if _, err := os.Stat(sd.script); err != nil {
		sd.missing = "no " + sd.script
	}
	b.cs = []*contender{gx, fl, sd}
	for _, c := range b.cs {
		c.errs = map[byte]string{}
		if c.missing != "" {
			b.logf("%s: N/A: %s", c.name, c.missing)
		}
	}
	return nil
}

// available lists the contenders that can run.
func (b *bench) available() []*contender {
	var out []*contender
	for _, c := range b.cs {
		if c.missing == "" {
			out = append(out, c)
		}
	}
	return out
}

// findRoot is the nearest folder at or above dir whose go.mod declares
// modulePath.
func findRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "module" && strings.Trim(f[1], `"`) == modulePath {
					return d, nil
				}
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of %s at or above %s; run from the module, or give -root", modulePath, dir)
		}
	}
}

// buildGpuexec builds gpuexec from the module root into the temporary
// folder, or checks the -gpuexec binary.
func (b *bench) buildGpuexec(ctx context.Context) (string, error) {
	if p := b.cfg.gpuexec; p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("-gpuexec: %v", err)
		}
		return abs, nil
	}
	return b.build(ctx, "gpuexec", ".")
}

// build builds the package pkg of the module into the temporary folder as
// name, with the -tags and -ldflags gpuexec is built with.
func (b *bench) build(ctx context.Context, name, pkg string) (string, error) {
	out := filepath.Join(b.dir, name)
	args := []string{"build", "-o", out}
	if b.cfg.tags != "" {
		args = append(args, "-tags", b.cfg.tags)
	}
	if b.cfg.ldflags != "" {
		args = append(args, "-ldflags", b.cfg.ldflags)
	}
	args = append(args, pkg)
	b.logf("building %s: go %s (in %s)", name, strings.Join(args, " "), b.root)
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir = b.root
	cmd.Env = b.env
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", name, err, msg)
	}
	return out, nil
}

// gitRev describes the checkout at root: its commit, and whether it has
// uncommitted changes; "" if git cannot tell.
func gitRev(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		rev += " with uncommitted changes"
	}
	return rev
}

// goTool is the go command: the one on PATH, else this toolchain's.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// machineLine is the line above the table: the machine, the tools, the
// date and the command line.
func (b *bench) machineLine() string {
	kernel := "?"
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(data))
	}
	parts := []string{
		fmt.Sprintf("%d CPUs", runtime.NumCPU()),
		"Linux " + kernel,
		b.gpuexec.goVersion,
	}
	for _, c := range b.cs[1:] {
		if c.missing == "" {
			parts = append(parts, toolVersion(c.bin))
		}
	}
	if b.load != "" {
		parts = append(parts, "load average "+b.load+" at start")
	}
	parts = append(parts, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	return fmt.Sprintf("Machine: %s. Command: `%s`", strings.Join(parts, ", "), b.commandLine())
}

func toolVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return filepath.Base(bin) + " ?"
	}
	v := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if strings.HasPrefix(v, "v") {
		v = filepath.Base(bin) + " " + v
	}
	return v
}

// commandLine is how this benchmark was started, quoted for a shell.
func (b *bench) commandLine() string {
	prog := "go run ./bench"
	if !strings.Contains(b.self, "go-build") || filepath.Base(b.self) != "bench" {
		prog = filepath.Base(os.Args[0])
	}
	words := []string{prog}
	for _, a := range b.cfg.args {
		if a == "" || strings.ContainsFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+", r))
		}) {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}

// setEnv is env with key set to value (any earlier entry dropped).
func setEnv(env []string, key, value string) []string {
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, key+"=") })
	return append(env, key+"="+value)
}
