//go:build linux

package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// (i): a day of jobs on a fake 24 GiB card.

// dayClass is a kind of job of the day: its peak video memory, its
// duration unscaled, and how many there are.
type dayClass struct {
	name  string
	mib   int64
	dur   time.Duration
	count int
}

// dayClasses is the seed's mix: 20 TTS jobs of 2 GiB x 30 s, 10 image jobs
// of 6 GiB x 60 s, 4 renders of 9 GiB x 180 s.
var dayClasses = []dayClass{
	{"tts", 2 << 10, 30 * time.Second, 20},
	{"image", 6 << 10, 60 * time.Second, 10},
	{"render", 9 << 10, 180 * time.Second, 4},
}

// scaled is c's duration divided by scale, rounded to the millisecond.
func (c dayClass) scaled(scale float64) time.Duration {
	return time.Duration(float64(c.dur) / scale).Round(time.Millisecond)
}

// dayJob is one job of the day, its duration scaled.
type dayJob struct {
	class int // index in dayClasses
	name  string
	mib   int64
	dur   time.Duration
}

// dayJobs lists the day's jobs, class by class, durations scaled.
func dayJobs(scale float64) []dayJob {
	var jobs []dayJob
	for ci, c := range dayClasses {
		for n := 1; n <= c.count; n++ {
			jobs = append(jobs, dayJob{class: ci, name: fmt.Sprintf("%s-%02d", c.name, n), mib: c.mib, dur: c.scaled(scale)})
		}
	}
	return jobs
}

// lowerBound is no schedule's makespan can be shorter than: the larger of
// the memory-time of all jobs over the usable memory (the card full all
// along) and the longest job.
func lowerBound(jobs []dayJob, usableMiB int64) time.Duration {
	var memTime float64 // MiB x ns
	var longest time.Duration
	for _, j := range jobs {
		memTime += float64(j.mib) * float64(j.dur)
		longest = max(longest, j.dur)
	}
	return max(time.Duration(math.Ceil(memTime/float64(usableMiB))), longest)
}

// arrival is when job (an index in the day's jobs) arrives, after the
// first arrival's time.
type arrival struct {
	job int
	at  time.Duration
}

// fixedArrivals is the jobs in a seeded shuffled order, gap apart.
func fixedArrivals(n int, seed uint64, gap time.Duration) []arrival {
	perm := rand.New(rand.NewPCG(seed, 0x1d)).Perm(n)
	out := make([]arrival, n)
	for i, j := range perm {
		out[i] = arrival{job: j, at: time.Duration(i) * gap}
	}
	return out
}

// randomArrivals gives each job an arrival drawn uniformly from
// [0, window), seeded, sorted by time; the first is moved to 0 (the day
// starts with its first job).
func randomArrivals(n int, seed uint64, window time.Duration) []arrival {
	r := rand.New(rand.NewPCG(seed, 0x2e))
	out := make([]arrival, n)
	for j := range out {
		out[j] = arrival{job: j, at: time.Duration(r.Int64N(max(int64(window), 1))).Round(time.Millisecond)}
	}
	slices.SortStableFunc(out, func(x, y arrival) int { return cmpInt(int64(x.at), int64(y.at)) })
	first := out[0].at
	for i := range out {
		out[i].at -= first
	}
	return out
}

// dayPolicy is how the jobs are run.
type dayPolicy int

const (
	pFlock dayPolicy = iota
	pWhole
	pShare
	pTimeout
)

var dayPolicyNames = []struct{ flag, name string }{
	{"flock", "flock(1)"},
	{"whole", "gpuexec whole card"},
	{"share", "gpuexec --share --vram"},
	{"timeout", "share + timeout (backfill)"},
}

var dayVariantNames = []struct{ flag, name string }{
	{"fixed", "fixed shuffled order"},
	{"random", "random arrivals"},
}

// sample is one reading of the registry by the bench's sampler.
type sample struct {
	t    int64 // Unix ns
	sum  int64 // MiB registered by live jobs
	jobs int   // live jobs registered
}

// jobResult is what one job of a run did. Times are Unix ns; start and end
// are 0 when the job did not note them.
type jobResult struct {
	arrival, start, end int64
	exit                int // the wrapper's exit status; -1: not started or killed
	err                 string
}

// dayFigures sums up one run.
type dayFigures struct {
	makespan       time.Duration
	util           float64                 // memory-time utilisation, 0..1
	waits          map[int][]time.Duration // by class, sorted
	minWait        time.Duration
	startGap       time.Duration // median time between two consecutive starts
	over, multi, n int           // samples over usable, with more than one job, in all
	peak           int64         // the largest sum seen, MiB
	failed         []string
	sampleSpan     time.Duration // first to last sample
}

// dayRun is one policy under one variant of arrivals.
type dayRun struct {
	policy  dayPolicy
	variant int
	skipped string // why it did not run (flock missing)
	err     string // why it could not be measured
	fig     dayFigures
	wall    time.Duration
}

// integral is the area under the step function the samples make (each
// sample's sum holds until the next sample; the last until to), between
// from and to, in MiB x ns. Before the first sample it is 0.
func integral(samples []sample, from, to int64) float64 {
	var a float64
	for i, s := range samples {
		next := to
		if i+1 < len(samples) {
			next = samples[i+1].t
		}
		lo, hi := max(s.t, from), min(next, to)
		if hi > lo {
			a += float64(s.sum) * float64(hi-lo)
		}
	}
	return a
}

// utilisation is the memory-time used between from and to over what the
// usable memory offers in that time.
func utilisation(samples []sample, from, to, usableMiB int64) float64 {
	if to <= from || usableMiB <= 0 {
		return 0
	}
	return integral(samples, from, to) / (float64(usableMiB) * float64(to-from))
}

// overCommit counts the samples whose sum exceeds the usable memory and
// those with more than one job registered, and finds the largest sum.
func overCommit(samples []sample, usableMiB int64) (over, multi int, peak int64) {
	for _, s := range samples {
		if s.sum > usableMiB {
			over++
		}
		if s.jobs > 1 {
			multi++
		}
		peak = max(peak, s.sum)
	}
	return over, multi, peak
}

// figures sums up a run: the makespan from the first arrival to the last
// end, the utilisation over it, each class's waits (a job's own start minus
// its arrival), the samples' counts. A job that did not exit 0, or did not
// note its start and end, is listed in failed.
func figures(jobs []dayJob, res []jobResult, samples []sample, usableMiB int64) dayFigures {
	f := dayFigures{waits: map[int][]time.Duration{}, minWait: -1}
	var first, last int64 = math.MaxInt64, 0
	for i, r := range res {
		first = min(first, r.arrival)
		switch {
		case r.exit != 0:
			msg := fmt.Sprintf("%s exited %d", jobs[i].name, r.exit)
			if r.exit < 0 {
				msg = fmt.Sprintf("%s: %s", jobs[i].name, r.err)
			}
			f.failed = append(f.failed, msg)
			continue
		case r.start == 0 || r.end == 0:
			f.failed = append(f.failed, jobs[i].name+" noted no start or end")
			continue
		}
		last = max(last, r.end)
		w := time.Duration(r.start - r.arrival)
		f.waits[jobs[i].class] = append(f.waits[jobs[i].class], w)
		if f.minWait < 0 || w < f.minWait {
			f.minWait = w
		}
	}
	for c := range f.waits {
		slices.Sort(f.waits[c])
	}
	var starts []int64
	for _, r := range res {
		if r.exit == 0 && r.start != 0 {
			starts = append(starts, r.start)
		}
	}
	slices.Sort(starts)
	var gaps []time.Duration
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, time.Duration(starts[i]-starts[i-1]))
	}
	f.startGap = pct(sorted(gaps), 0.5)
	if last > first {
		f.makespan = time.Duration(last - first)
		f.util = utilisation(samples, first, last, usableMiB)
	}
	f.over, f.multi, f.peak = overCommit(samples, usableMiB)
	f.n = len(samples)
	if len(samples) > 1 {
		f.sampleSpan = time.Duration(samples[len(samples)-1].t - samples[0].t)
	}
	return f
}

// day is (i): every selected policy under every selected variant of
// arrivals, one after another, each on a fresh lock folder with its own
// fake card.
func (b *bench) day(ctx context.Context) {
	cfg := b.cfg
	b.dayLoad = loadAvg()
	jobs := dayJobs(cfg.dayScale)
	lb := lowerBound(jobs, fakeUsableMiB)
	b.dayLB = lb
	b.dayArrivals = [][]arrival{
		fixedArrivals(len(jobs), cfg.daySeed, cfg.dayGap),
		randomArrivals(len(jobs), cfg.daySeed, lb/2),
	}
	var order []string
	for _, a := range b.dayArrivals[0] {
		order = append(order, jobs[a.job].name)
	}
	b.logf("(i) a day of %d jobs, times / %g; lower bound %s; seed %d; fixed order: %s",
		len(jobs), cfg.dayScale, lb.Round(time.Millisecond), cfg.daySeed, strings.Join(order, " "))
	b.daySim = daySimRows(jobs, b.dayArrivals, cfg.dayVariants, cfg.dayTimeoutFactor, cfg.dayKillAfter)
	gx := b.cs[0].bin
	if err := b.checkFakeSMI(ctx, gx); err != nil {
		b.logf("(i) the fake nvidia-smi: %v", err)
		b.dayErr = err.Error()
		b.failed = true
		return
	}
	for vi := range dayVariantNames {
		if !cfg.dayVariants[vi] {
			continue
		}
		for pi := range dayPolicyNames {
			p := dayPolicy(pi)
			if !cfg.dayPolicies[p] || ctx.Err() != nil {
				continue
			}
			r := &dayRun{policy: p, variant: vi}
			b.dayRuns = append(b.dayRuns, r)
			if p == pFlock && b.cs[1].missing != "" {
				r.skipped = b.cs[1].missing
				continue
			}
			t0 := time.Now()
			fig, err := b.dayRunOne(ctx, jobs, b.dayArrivals[vi], p, vi)
			r.wall = time.Since(t0)
			if err != nil {
				r.err = err.Error()
				b.failed = true
				b.logf("(i) %s, %s: %v", dayPolicyNames[p].name, dayVariantNames[vi].name, err)
				continue
			}
			r.fig = fig
			if len(fig.failed) > 0 || fig.over > 0 || (p == pFlock || p == pWhole) && fig.multi > 0 {
				b.failed = true
			}
			b.logf("(i) %s, %s: makespan %.2f s (%.2f× the lower bound), utilisation %.0f%%, %d/%d jobs exit 0, %d samples over usable, in %s",
				dayPolicyNames[p].name, dayVariantNames[vi].name, fig.makespan.Seconds(), float64(fig.makespan)/float64(lb),
				100*fig.util, len(jobs)-len(fig.failed), len(jobs), fig.over, r.wall.Round(100*time.Millisecond))
			for _, f := range fig.failed {
				b.logf("(i)   failed: %s", f)
			}
		}
	}
	if cfg.dayChart != "" && len(b.dayRuns) > 0 {
		if err := os.WriteFile(cfg.dayChart, []byte(dayChart(b.dayRuns, lb)), 0o644); err != nil {
			b.logf("(i) -day-chart: %v", err)
			b.failed = true
		} else {
			b.logf("(i) chart written to %s", cfg.dayChart)
		}
	}
}

// dayDir makes a run's folder: lock/ (the lock alone in its folder, so that
// the registry's writes wake no watcher of it), registry/, out/ (the jobs'
// notes) and the fake nvidia-smi, a link to this program.
func (b *bench) dayDir(name string) (dir string, err error) {
	if dir, err = os.MkdirTemp(b.dir, name+"-"); err != nil {
		return "", err
	}
	for _, d := range []string{"lock", registryName, "out"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return "", err
		}
	}
	return dir, os.Symlink(b.self, filepath.Join(dir, fakeSMIName))
}

// checkFakeSMI checks the fake against gpuexec's own reading of it:
// `gpuexec status` must show the card.
func (b *bench) checkFakeSMI(ctx context.Context, gx string) error {
	dir, err := b.dayDir("i-status")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, gx, "status", "--lock", filepath.Join(dir, "lock", "gpu.lock"), "--nvidia-smi", filepath.Join(dir, fakeSMIName))
	cmd.Env = b.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("gpuexec status: %v\n%s", err, out)
	}
	want := fmt.Sprintf("GPU 0 %s: 0 MiB of 24.0 GiB used, 23.7 GiB free, %d MiB reserved", fakeName, fakeReservedMiB)
	if !strings.Contains(string(out), want) {
		return fmt.Errorf("gpuexec status does not show %q:\n%s", want, out)
	}
	return nil
}

// dayArgv is the command that runs job j under policy p.
func (b *bench) dayArgv(p dayPolicy, j dayJob, lock, smi string) []string {
	if p == pFlock {
		return []string{b.cs[1].bin, lock, b.self}
	}
	argv := []string{b.cs[0].bin, "--lock", lock, "--owner", "bench", "--slug", j.name, "--nvidia-smi", smi}
	if p >= pShare {
		argv = append(argv, "--share", "--vram", sizeArg(j.mib))
	}
	if p == pTimeout {
		argv = append(argv, "--timeout", dayTimeout(j, b.cfg.dayTimeoutFactor).String(), "--kill-after", b.cfg.dayKillAfter.String())
	}
	return append(argv, "--", b.self)
}

// dayTimeout is the --timeout the share + timeout policy gives j: its
// duration × factor, to the millisecond.
func dayTimeout(j dayJob, factor float64) time.Duration {
	return time.Duration(float64(j.dur) * factor).Round(time.Millisecond)
}

// sizeArg is mib as --vram takes it: 2G, or 1500M.
func sizeArg(mib int64) string {
	if mib%1024 == 0 {
		return strconv.FormatInt(mib/1024, 10) + "G"
	}
	return strconv.FormatInt(mib, 10) + "M"
}

// dayRunOne runs the day's jobs under p with the arrivals given, samples
// the registry all along, and sums it up.
func (b *bench) dayRunOne(ctx context.Context, jobs []dayJob, arr []arrival, p dayPolicy, variant int) (dayFigures, error) {
	name := "i-" + dayVariantNames[variant].flag + "-" + dayPolicyNames[p].flag
	dir, err := b.dayDir(name)
	if err != nil {
		return dayFigures{}, err
	}
	lock := filepath.Join(dir, "lock", "gpu.lock")
	smi := filepath.Join(dir, fakeSMIName)
	reg := filepath.Join(dir, registryName)
	var total time.Duration
	for _, j := range jobs {
		total += j.dur
	}
	// Room for one job at a time plus gpuexec's latencies, generously.
	limit := arr[len(arr)-1].at + total + time.Duration(len(jobs))*5*time.Second + time.Minute
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	stop := make(chan struct{})
	var (
		samples []sample
		sampErr error
		swg     sync.WaitGroup
	)
	swg.Go(func() {
		tick := time.NewTicker(b.cfg.daySample)
		defer tick.Stop()
		for {
			es, err := readRegistry(reg)
			if err != nil {
				sampErr = err
				return
			}
			s := sample{t: time.Now().UnixNano(), jobs: len(es)}
			for _, e := range es {
				s.sum += e.mib
			}
			samples = append(samples, s)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})

	res := make([]jobResult, len(jobs))
	procs := make([]*proc, len(jobs))
	var startErr error
	t0 := time.Now()
	for _, a := range arr {
		if !sleepCtx(ctx, time.Until(t0.Add(a.at))) {
			break
		}
		j := jobs[a.job]
		logf, err := b.logFile(name + "-" + j.name + ".log")
		if err != nil {
			startErr = err
			break
		}
		env := append(slices.Clone(b.env), roleEnv+"=gpujob",
			dayMiBEnv+"="+strconv.FormatInt(j.mib, 10), dayDurEnv+"="+j.dur.String(),
			dayRegEnv+"="+reg, dayOutEnv+"="+filepath.Join(dir, "out", j.name))
		res[a.job].arrival = time.Now().UnixNano()
		pr, err := start(ctx, b.dayArgv(p, j, lock, smi), env, false, logf, logf)
		logf.Close()
		if err != nil {
			startErr = err
			break
		}
		procs[a.job] = pr
	}
	for i, pr := range procs {
		res[i].exit = -1
		if pr == nil {
			res[i].err = "not started"
			continue
		}
		<-pr.done
		if pr.err == nil {
			res[i].exit = 0
		} else if c := exitCode(pr.err); c >= 0 {
			res[i].exit = c
		} else {
			res[i].err = pr.err.Error()
		}
		if res[i].exit != 0 {
			res[i].err += tail(filepath.Join(b.logs, name+"-"+jobs[i].name+".log"))
		}
		res[i].start, res[i].end = readJobNotes(filepath.Join(dir, "out", jobs[i].name))
	}
	// A last reading once every job is gone: the registry must be empty.
	time.Sleep(b.cfg.daySample)
	close(stop)
	swg.Wait()
	switch {
	case startErr != nil:
		return dayFigures{}, startErr
	case sampErr != nil:
		return dayFigures{}, fmt.Errorf("sampler: %v", sampErr)
	case ctx.Err() != nil:
		return dayFigures{}, fmt.Errorf("not done within %s: %v", limit, ctx.Err())
	}
	fig := figures(jobs, res, samples, fakeUsableMiB)
	for i, r := range res {
		if r.exit != 0 && r.err != "" {
			b.logf("(i) %s %s: %s", name, jobs[i].name, r.err)
		}
	}
	return fig, nil
}

// readJobNotes reads a gpujob's "start NS PID" and "end NS" lines; 0 for
// what is missing.
func readJobNotes(path string) (start, end int64) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "start":
			start = n
		case "end":
			end = n
		}
	}
	return start, end
}

// loadAvg is the 1-minute load average, "" where /proc cannot tell.
func loadAvg() string {
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) > 0 {
			return f[0]
		}
	}
	return ""
}
