//go:build linux

package main

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu"
)

func TestLowerBound(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name   string
		jobs   []dayJob
		usable int64
		want   time.Duration
	}{
		{"memory-time bound", []dayJob{{mib: 1000, dur: 2 * s}, {mib: 1000, dur: 2 * s}, {mib: 500, dur: 4 * s}}, 1000, 6 * s},
		{"longest job bound", []dayJob{{mib: 10, dur: 9 * s}, {mib: 10, dur: 1 * s}}, 1000, 9 * s},
		{"one job filling the card", []dayJob{{mib: 1000, dur: 3 * s}}, 1000, 3 * s},
		{"rounded up to the ns", []dayJob{{mib: 1, dur: 10}}, 3, 10},
		{"rounded up to the ns, memory bound", []dayJob{{mib: 2, dur: 10}, {mib: 2, dur: 10}}, 3, 14},
		// The seed's mix at 1/100: (20·2048·0.3 + 10·6144·0.6 + 4·9216·1.8)
		// MiB·s ÷ 24222 MiB = 115507.2 ÷ 24222 s.
		{"the seed's mix, ÷ 100", dayJobs(100), fakeUsableMiB, time.Duration(math.Ceil(115507.2e9 / 24222))},
		{"the seed's mix, ÷ 10", dayJobs(10), fakeUsableMiB, time.Duration(math.Ceil(1155072e9 / 24222))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := lowerBound(tc.jobs, tc.usable)
			if d := got - tc.want; d < -1 || d > 1 { // float rounding
				t.Errorf("lowerBound = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDayJobs(t *testing.T) {
	jobs := dayJobs(100)
	count := map[string]int{}
	for _, j := range jobs {
		c := dayClasses[j.class]
		count[c.name]++
		if want := c.dur / 100; j.dur != want || j.mib != c.mib || !strings.HasPrefix(j.name, c.name+"-") {
			t.Errorf("%+v: want %s of %d MiB", j, want, c.mib)
		}
	}
	if want := map[string]int{"tts": 20, "image": 10, "render": 4}; fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("jobs per class %v, want %v", count, want)
	}
	if d := dayJobs(100)[0].dur; d != 300*time.Millisecond {
		t.Errorf("a TTS job at ÷100 runs %s, want 300ms", d)
	}
}

func TestPct(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.5, 7 * time.Millisecond},
		{ms(7), 1, 7 * time.Millisecond},
		{ms(1, 2), 0.5, 1 * time.Millisecond},
		{ms(1, 2, 3), 0.5, 2 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.51, 3 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.9, 9 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 1, 10 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0, 1 * time.Millisecond},
	} {
		if got := pct(tc.in, tc.p); got != tc.want {
			t.Errorf("pct(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
		}
	}
}

func TestIntegralAndUtilisation(t *testing.T) {
	// A step function: 0 from 0, 100 from 10, 50 from 20, 0 from 30.
	steps := []sample{{t: 0, sum: 0}, {t: 10, sum: 100}, {t: 20, sum: 50}, {t: 30, sum: 0}}
	for _, tc := range []struct {
		name     string
		samples  []sample
		from, to int64
		want     float64
	}{
		{"no samples", nil, 0, 100, 0},
		{"whole span", steps, 0, 40, 100*10 + 50*10},
		{"clipped at both ends", steps, 15, 25, 100*5 + 50*5},
		{"the last sample holds to the end", []sample{{t: 0, sum: 10}}, 0, 7, 70},
		{"nothing before the first sample", []sample{{t: 5, sum: 10}}, 0, 10, 50},
		{"an empty span", steps, 20, 20, 0},
		{"after the span", steps, 0, 5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := integral(tc.samples, tc.from, tc.to); got != tc.want {
				t.Errorf("integral = %v, want %v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name             string
		samples          []sample
		from, to, usable int64
		want             float64
	}{
		{"full all along", []sample{{t: 0, sum: 200}}, 0, 10, 200, 1},
		{"half full", steps, 10, 30, 100, 0.75},
		{"an empty span", steps, 10, 10, 100, 0},
		{"no usable memory", steps, 0, 10, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := utilisation(tc.samples, tc.from, tc.to, tc.usable); got != tc.want {
				t.Errorf("utilisation = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestOverCommit(t *testing.T) {
	for _, tc := range []struct {
		name        string
		samples     []sample
		usable      int64
		over, multi int
		peak        int64
	}{
		{"none", nil, 100, 0, 0, 0},
		{"at usable is not over", []sample{{sum: 100, jobs: 1}}, 100, 0, 0, 100},
		{"one over", []sample{{sum: 50, jobs: 1}, {sum: 101, jobs: 2}, {sum: 0}}, 100, 1, 1, 101},
		{"two jobs, one at 0 MiB", []sample{{sum: 10, jobs: 2}, {sum: 10, jobs: 1}}, 100, 0, 1, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			over, multi, peak := overCommit(tc.samples, tc.usable)
			if over != tc.over || multi != tc.multi || peak != tc.peak {
				t.Errorf("overCommit = %d, %d, %d; want %d, %d, %d", over, multi, peak, tc.over, tc.multi, tc.peak)
			}
		})
	}
}

func TestFigures(t *testing.T) {
	s := int64(time.Second)
	jobs := []dayJob{{class: 0, name: "tts-01"}, {class: 0, name: "tts-02"}, {class: 2, name: "render-01"}, {class: 1, name: "image-01"}}
	res := []jobResult{
		{arrival: 10 * s, start: 11 * s, end: 12 * s},
		{arrival: 10 * s, start: 13 * s, end: 14 * s},
		{arrival: 11 * s, start: 12 * s, end: 20 * s},
		{arrival: 12 * s, exit: 124, start: 13 * s},
	}
	samples := []sample{{t: 10 * s, sum: 0}, {t: 11 * s, sum: 100, jobs: 1}, {t: 12 * s, sum: 250, jobs: 2}, {t: 20 * s, sum: 0}}
	f := figures(jobs, res, samples, 200)
	if f.makespan != 10*time.Second {
		t.Errorf("makespan %v, want 10s (first arrival to the last end)", f.makespan)
	}
	if want := (100.0*1 + 250*8) / (200 * 10); f.util != want {
		t.Errorf("utilisation %v, want %v", f.util, want)
	}
	if got := f.waits[0]; !slices.Equal(got, []time.Duration{time.Second, 3 * time.Second}) {
		t.Errorf("tts waits %v, want [1s 3s]", got)
	}
	if got := f.waits[2]; !slices.Equal(got, []time.Duration{time.Second}) {
		t.Errorf("render waits %v, want [1s]", got)
	}
	if len(f.waits[1]) != 0 {
		t.Errorf("the failed image job's wait counted: %v", f.waits[1])
	}
	if f.minWait != time.Second {
		t.Errorf("shortest wait %v, want 1s", f.minWait)
	}
	// Starts at 11, 12, 13 s (the failed job's left out): gaps 1 s, 1 s.
	if f.startGap != time.Second {
		t.Errorf("start-to-start p50 %v, want 1s", f.startGap)
	}
	if !slices.Equal(f.failed, []string{"image-01 exited 124"}) {
		t.Errorf("failed %q, want the image job", f.failed)
	}
	if f.over != 1 || f.multi != 1 || f.peak != 250 || f.n != 4 {
		t.Errorf("over %d, multi %d, peak %d, n %d; want 1, 1, 250, 4", f.over, f.multi, f.peak, f.n)
	}
	// A job that noted no end is a failure too, never dropped.
	res[3] = jobResult{arrival: 12 * s, start: 13 * s}
	if f := figures(jobs, res, samples, 200); !slices.Equal(f.failed, []string{"image-01 noted no start or end"}) {
		t.Errorf("failed %q", f.failed)
	}
}

func TestArrivals(t *testing.T) {
	const n = 34
	fixed := fixedArrivals(n, 1, 20*time.Millisecond)
	var seen []int
	for i, a := range fixed {
		if a.at != time.Duration(i)*20*time.Millisecond {
			t.Errorf("fixed arrival %d at %v", i, a.at)
		}
		seen = append(seen, a.job)
	}
	slices.Sort(seen)
	for i := range seen {
		if seen[i] != i {
			t.Fatalf("fixed order is not a permutation: %v", seen)
		}
	}
	if fmt.Sprint(fixedArrivals(n, 1, time.Millisecond)) == fmt.Sprint(fixedArrivals(n, 2, time.Millisecond)) {
		t.Error("seeds 1 and 2 give the same order")
	}
	if fmt.Sprint(fixed) != fmt.Sprint(fixedArrivals(n, 1, 20*time.Millisecond)) {
		t.Error("the same seed gives another order")
	}
	window := 2 * time.Second
	random := randomArrivals(n, 7, window)
	if fmt.Sprint(random) != fmt.Sprint(randomArrivals(n, 7, window)) {
		t.Error("the same seed gives other arrivals")
	}
	seen = nil
	for i, a := range random {
		if a.at < 0 || a.at >= window || i > 0 && a.at < random[i-1].at {
			t.Errorf("random arrival %d at %v: not sorted within [0, %v)", i, a.at, window)
		}
		seen = append(seen, a.job)
	}
	if random[0].at != 0 {
		t.Errorf("the first random arrival is at %v, want 0", random[0].at)
	}
	slices.Sort(seen)
	for i := range seen {
		if seen[i] != i {
			t.Fatalf("random arrivals are not one per job: %v", seen)
		}
	}
}

// fakeCard makes a folder with a registry and a link named nvidia-smi to
// this test binary (TestMain plays the fake when started so).
func fakeCard(t *testing.T) (smi, reg string) {
	t.Helper()
	dir := t.TempDir()
	reg = filepath.Join(dir, registryName)
	if err := os.Mkdir(reg, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	smi = filepath.Join(dir, fakeSMIName)
	if err := os.Symlink(self, smi); err != nil {
		t.Fatal(err)
	}
	return smi, reg
}

func register(t *testing.T, reg string, pid int, mib int64, start uint64) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(reg, strconv.Itoa(pid)), fmt.Appendf(nil, "%d %d\n", mib, start), 0o644); err != nil {
		t.Fatal(err)
	}
}

// deadPID is the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestFakeSMI(t *testing.T) {
	smi, reg := fakeCard(t)
	me := os.Getpid()
	st, ok := liveStart(me)
	if !ok {
		t.Fatal("liveStart of this process")
	}
	// A live process of another start time: the pid is another's now.
	register(t, reg, os.Getppid(), 9216, 1)
	register(t, reg, deadPID(t), 6144, 1)
	os.WriteFile(filepath.Join(reg, "123.tmp"), []byte("garbage"), 0o644)
	gpuQuery := []string{"--query-gpu=index,uuid,memory.total,memory.used,memory.free,memory.reserved,mig.mode.current,name", "--format=csv,noheader,nounits"}
	appQuery := []string{"--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"}
	for _, tc := range []struct {
		name string
		mib  int64 // this process's registration; -1: none
		args []string
		out  string
		code int
	}{
		{"idle card", -1, gpuQuery, "0, " + fakeUUID + ", 24564, 0, 24222, 342, Disabled, NVIDIA GeForce RTX 4090\n", 0},
		{"idle card, no processes", -1, appQuery, "", 0},
		{"a job of 2 GiB", 2048, gpuQuery, "0, " + fakeUUID + ", 24564, 2048, 22174, 342, Disabled, NVIDIA GeForce RTX 4090\n", 0},
		{"its process", 2048, appQuery, fmt.Sprintf("%s, %d, 2048\n", fakeUUID, me), 0},
		{"a job that has allocated nothing yet is not listed", 0, appQuery, "", 0},
		{"the fields in the order asked", 100, []string{"--query-gpu=name,memory.free,index", "--format=csv,noheader,nounits"}, "NVIDIA GeForce RTX 4090, 24122, 0\n", 0},
		{"a field it does not know", -1, []string{"--query-gpu=index,power.draw", "--format=csv,noheader,nounits"}, "Field \"power.draw\" is not a valid field to query.\n\n", 2},
		{"another format", -1, []string{"--query-gpu=index", "--format=csv"}, "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(filepath.Join(reg, strconv.Itoa(me)))
			if tc.mib >= 0 {
				register(t, reg, me, tc.mib, st)
			}
			out, code := fakeSMIAnswer(reg, tc.args)
			if code != tc.code || tc.code == 0 && out != tc.out || tc.code != 0 && tc.out != "" && out != tc.out {
				t.Errorf("answer %q, %d; want %q, %d", out, code, tc.out, tc.code)
			}
		})
	}

	// gpuexec's own parser reads it back, through the link.
	os.Remove(filepath.Join(reg, strconv.Itoa(me)))
	register(t, reg, me, 6144, st)
	s, err := gpu.Locate(smi)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := s.Devices(context.Background())
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	want := gpu.Device{Index: 0, UUID: fakeUUID, Name: fakeName, MIG: gpu.MIGOff,
		Memory: gpu.Memory{Total: 24564, Used: 6144, Free: 24222 - 6144, Reserved: 342}}
	if len(devs) != 1 || fmt.Sprintf("%+v", devs[0]) != fmt.Sprintf("%+v", want) {
		t.Errorf("Devices = %+v, want %+v", devs, want)
	}
	if u := devs[0].Memory.Usable(); u != fakeUsableMiB {
		t.Errorf("usable %v, want %d MiB", u, fakeUsableMiB)
	}
	ps, err := s.Processes(context.Background())
	if err != nil {
		t.Fatalf("Processes: %v", err)
	}
	if len(ps) != 1 || ps[0].PID != me || ps[0].Used != 6144 || ps[0].Device != fakeUUID {
		t.Errorf("Processes = %+v, want this process with 6144 MiB", ps)
	}
}

func TestReadRegistry(t *testing.T) {
	_, reg := fakeCard(t)
	me := os.Getpid()
	st, _ := liveStart(me)
	register(t, reg, me, 10, st)
	register(t, reg, deadPID(t), 20, st)
	register(t, reg, 1, 30, st+1<<40) // pid 1, another start
	es, err := readRegistry(reg)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(es) != fmt.Sprint([]regEntry{{pid: me, mib: 10}}) {
		t.Errorf("readRegistry = %v, want only this process", es)
	}
	os.WriteFile(filepath.Join(reg, "77"), []byte("not a number"), 0o644)
	if _, err := readRegistry(reg); err == nil {
		t.Error("a malformed entry read without an error")
	}
}

// TestGpujob runs the job role for 200 ms with a peak of 1000 MiB and
// follows its registration: it grows, reaches the peak, and is gone at
// the end, with the start and end noted.
func TestGpujob(t *testing.T) {
	_, reg := fakeCard(t)
	out := filepath.Join(t.TempDir(), "notes")
	self, _ := os.Executable()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), roleEnv+"=gpujob", dayMiBEnv+"=1000", dayDurEnv+"=200ms", dayRegEnv+"="+reg, dayOutEnv+"="+out)
	cmd.Stderr = os.Stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var seen []int64
	done := make(chan error)
	go func() { done <- cmd.Wait() }()
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("gpujob: %v", err)
			}
			running = false
		case <-time.After(time.Millisecond):
			es, err := readRegistry(reg)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				if e.pid == cmd.Process.Pid && (len(seen) == 0 || seen[len(seen)-1] != e.mib) {
					seen = append(seen, e.mib)
				}
			}
		}
	}
	wall := time.Since(t0)
	if len(seen) < 3 || seen[len(seen)-1] != 1000 || !slices.IsSorted(seen) {
		t.Errorf("registrations seen %v: want a growth to 1000", seen)
	}
	if es, _ := readRegistry(reg); len(es) != 0 {
		t.Errorf("still registered after the end: %v", es)
	}
	start, end := readJobNotes(out)
	if d := time.Duration(end - start); d < 200*time.Millisecond || d > wall {
		t.Errorf("noted run %v (start %d, end %d), want at least 200ms, at most %v", d, start, end, wall)
	}
}

func TestDayChart(t *testing.T) {
	runs := []*dayRun{
		{policy: pFlock, variant: 0, fig: dayFigures{makespan: 19 * time.Second}},
		{policy: pWhole, variant: 0, fig: dayFigures{makespan: 21 * time.Second}},
		{policy: pShare, variant: 0, fig: dayFigures{makespan: 7 * time.Second}},
		{policy: pTimeout, variant: 0, err: "boom"},
		{policy: pFlock, variant: 1, skipped: "no flock(1) on PATH"},
		{policy: pShare, variant: 1, fig: dayFigures{makespan: 8 * time.Second}},
	}
	svg := dayChart(runs, 5*time.Second)
	d := xml.NewDecoder(strings.NewReader(svg))
	rects, dashed := 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			for _, a := range se.Attr {
				if se.Name.Local == "rect" && a.Name.Local == "fill" && a.Value != "white" {
					rects++
				}
				if a.Name.Local == "stroke-dasharray" {
					dashed++
				}
			}
		}
	}
	// A bar per run and a legend swatch per policy; a lower bound per group.
	if rects != len(runs)+len(dayPolicyNames) || dashed != 2 {
		t.Errorf("%d coloured rects, %d dashed lines; want %d and 2", rects, dashed, len(runs)+len(dayPolicyNames))
	}
	for _, want := range []string{">19.00<", ">7.00<", ">N/A<", "fixed shuffled order", "random arrivals", "share + timeout (backfill)"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
}

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{{0, 1}, {0.3, 0.5}, {1, 1}, {1.1, 2}, {3, 5}, {7, 10}, {12, 20}, {45, 50}} {
		if got := niceStep(tc.in); got != tc.want {
			t.Errorf("niceStep(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestParseDayFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
		i    bool
	}{
		{nil, "", false},
		{[]string{"-only", "i"}, "", true},
		{[]string{"-only", "a,i"}, "", true},
		{[]string{"-only", "j"}, "not one of a,b,c,d,e,f,g,h,i", false},
		{[]string{"-only", "i", "-day-scale", "0"}, "-day-scale", false},
		{[]string{"-only", "i", "-day-policies", "share,fifo"}, "-day-policies", false},
		{[]string{"-only", "i", "-day-policies", "share,none"}, "-day-policies", false},
		{[]string{"-only", "i", "-day-policies", "none"}, "", true},
		{[]string{"-only", "i", "-day-arrivals", "poisson"}, "-day-arrivals", false},
		{[]string{"-only", "i", "-day-timeout-factor", "-1"}, "-day-timeout-factor", false},
	} {
		c, err := parseFlags(tc.args, io.Discard)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one with %q", tc.args, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.err == "" && c.sel['i'] != tc.i:
			t.Errorf("%q: i selected %v, want %v", tc.args, c.sel['i'], tc.i)
		case tc.err == "" && slices.Contains(tc.args, "none") && len(c.dayPolicies) != 0:
			t.Errorf("%q: policies %v, want none", tc.args, c.dayPolicies)
		}
	}
}
