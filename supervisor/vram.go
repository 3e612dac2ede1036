package supervisor

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/lock"
)

// What the supervisor reads from the cards (Config.GPU): before the start,
// whether the device has the free memory the job asked for (Config.VRAM);
// while the job runs, how much its own processes use, for the "job exited"
// line.

// EnvDeviceOrder makes CUDA number the devices as nvidia-smi does (PCI bus
// order), so that CUDA_VISIBLE_DEVICES=1 is nvidia-smi's GPU 1; it is set
// with CUDA_VISIBLE_DEVICES, and for a job with --vram (whose memory was
// checked in nvidia-smi's numbering) unless its environment sets it.
const EnvDeviceOrder = "CUDA_DEVICE_ORDER"

// sampleGap is the moment between the two readings of free memory that a
// decision takes the smaller of: a blip in one reading (an allocation
// freed and retaken) neither starts a job nor keeps it waiting for long.
const sampleGap = 250 * time.Millisecond

// freshSample is how old the previous reading may be and still count as
// the second one of a decision (the waiter asks every second or so).
const freshSample = 2 * time.Second

// processesEvery is how often the processes on a refused device are read
// again for the waiting line: who is in the way changes slowly, and each
// read is one more nvidia-smi run.
const processesEvery = 5 * time.Second

// Peak sampling while the job runs: the first reading peakFirst into the
// job (a job that ends sooner, `gpuexec -- true`, runs no nvidia-smi at
// all), then every peakEvery (its cost: docs/performance.md, "Figures the
// code rests on"); frameworks keep what their allocator
// reserved (PyTorch's caching allocator) so the peak is a plateau that
// lasts well over 2 s. A spike shorter than peakEvery can be missed: the
// figure is a lower bound.
const (
	peakFirst = time.Second
	peakEvery = 2 * time.Second
)

// validateVRAM is Validate's part for Config.GPU, VRAM, Share, Reserve and
// VRAMEnforce.
func (cfg Config) validateVRAM() error {
	switch {
	case cfg.VRAM < 0:
		return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf("must not be negative, got %d MiB", cfg.VRAM)}
	case cfg.Share && cfg.VRAM == 0:
		return &lock.OptionError{Option: "share", Problem: "needs --vram SIZE, the job's budget"}
	case cfg.VRAMEnforce && !cfg.Share:
		return &lock.OptionError{Option: "vram-enforce", Problem: "checks a sharer's budget: it needs --share"}
	case cfg.Reserve < 0:
		return &lock.OptionError{Option: "reserve", Problem: fmt.Sprintf("must not be negative, got %d MiB", cfg.Reserve)}
	case cfg.Reserve > 0 && !cfg.Share:
		return &lock.OptionError{Option: "reserve", Problem: "is what sharers leave free: it needs --share"}
	case cfg.VRAM == 0:
		return nil
	case cfg.GPU == nil:
		return &lock.OptionError{Option: "vram", Problem: "needs nvidia-smi, and none was found"}
	case !machineLocal(cfg.Backend) && cfg.Share:
		return &lock.OptionError{Option: "share", Problem: "shares this machine's GPUs, so it needs a lock file, not an etcd:// lock"}
	case !machineLocal(cfg.Backend):
		return &lock.OptionError{Option: "vram", Problem: "is checked on this machine's GPUs, so it needs a lock file, not an etcd:// lock"}
	}
	return nil
}

// CheckGPUs asks Config.GPU once, when the job needs free memory
// (Config.VRAM), whether every device the job may take is one the driver
// lists and reports free memory for, and whether the size can ever be
// free on it (on enough of them): an *lock.OptionError naming "vram" when
// not (no working nvidia-smi, an ambiguous listing, no such GPU, a device
// that does not report its free memory or its MIG mode, one in MIG mode,
// one whose total less what the driver reserves, and for a sharer less
// the reserve, is smaller than the size). Run does not call it: a program
// calls it after Validate, to refuse at once what could never start.
func (cfg Config) CheckGPUs(ctx context.Context) error {
	if cfg.VRAM <= 0 || cfg.GPU == nil {
		return nil
	}
	devs, err := cfg.GPU.Devices(ctx)
	if err != nil {
		return &lock.OptionError{Option: "vram", Problem: "cannot be checked: " + err.Error()}
	}
	names := cfg.vramDevices()
	if names == nil {
		names = indexes(devs)
	}
	if len(names) == 0 {
		return &lock.OptionError{Option: "vram", Problem: "cannot be checked: " + EnvCUDA + " is empty, so the job sees no GPU"}
	}
	fits := 0
	var small, mig []string
	for _, name := range names {
		d, ok := gpu.Find(devs, name)
		if !ok {
			return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf("cannot be checked: nvidia-smi lists no GPU %q (it lists %s)", name, listed(devs))}
		}
		if !d.Memory.Free.Known() {
			return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf("cannot be checked: GPU %d (%s) does not report its free memory", d.Index, d.Name)}
		}
		switch d.MIG {
		case gpu.MIGUnknown:
			return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf("cannot be checked: GPU %d (%s) does not say whether it is in MIG mode", d.Index, d.Name)}
		case gpu.MIGOn:
			mig = append(mig, strconv.Itoa(d.Index))
			continue
		}
		if never := cfg.neverFree(d.Memory); never != "" {
			small = append(small, fmt.Sprintf("GPU %d has %s", d.Index, never))
			continue
		}
		fits++
	}
	// A job waits for one device of a device set, but for every device
	// it sees without one.
	single := len(cfg.Lock.Devices) == 0
	if len(mig) > 0 && (fits == 0 || single) {
		return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf(
			"cannot be checked on GPU %s: in MIG mode nvidia-smi gives the whole card's memory, not that of the MIG instance a job runs in; "+
				"run the job without --vram and --share (the lock alone keeps jobs apart), or turn MIG off (nvidia-smi -i %s -mig 0)",
			strings.Join(mig, ", "), strings.Join(mig, ","))}
	}
	if fits == 0 || (single && len(small) > 0) {
		return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf("%s can never be free: %s", cfg.VRAM, strings.Join(small, ", "))}
	}
	// ... and for Need of them at once.
	if need := max(cfg.Lock.Need, 1); fits < need {
		for _, n := range mig {
			small = append(small, "GPU "+n+" is in MIG mode")
		}
		return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf("%s can never be free on %d GPUs at once (--need %d): %s", cfg.VRAM, need, need, strings.Join(small, ", "))}
	}
	return nil
}

// neverFree says how much a device of memory m can ever give the job,
// when that is less than it needs ("9.8 GiB (10.0 GiB less 240 MiB
// reserved by the driver)"; for a sharer also less the reserve); "" when
// it can give enough or its total is unknown.
func (cfg Config) neverFree(m gpu.Memory) string {
	room := m.Usable()
	if !room.Known() {
		return ""
	}
	var less []string
	if m.Reserved.Known() && m.Reserved > 0 {
		less = append(less, m.Reserved.String()+" reserved by the driver")
	}
	what := ""
	if cfg.Share {
		reserve := reserveOf(cfg.Reserve, m.Total)
		room -= reserve
		less = append(less, "a "+reserve.String()+" reserve")
		what = " to share"
	}
	if room >= cfg.VRAM {
		return ""
	}
	if len(less) == 0 {
		return fmt.Sprintf("%s in all", m.Total)
	}
	return fmt.Sprintf("%s%s (%s less %s)", max(room, 0), what, m.Total, strings.Join(less, " and "))
}

// vramDevices are the devices the job may take: with Lock.Devices, those;
// else the ones it will see (visibleDevices).
func (cfg Config) vramDevices() []string {
	if len(cfg.Lock.Devices) > 0 {
		return cfg.Lock.Devices
	}
	return cfg.visibleDevices()
}

// visibleDevices are the devices a job without Lock.Devices sees: those
// CUDA_VISIBLE_DEVICES names in its environment, else nil, meaning every
// device.
func (cfg Config) visibleDevices() []string {
	v, ok := lookupEnv(cfg.Env, EnvCUDA)
	if !ok {
		return nil
	}
	var names []string
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if names == nil {
		names = []string{} // CUDA_VISIBLE_DEVICES="": no device at all
	}
	return names
}

// lookupEnv finds k in env (nil: gpuexec's own), the last setting winning.
func lookupEnv(env []string, k string) (string, bool) {
	if env == nil {
		return os.LookupEnv(k)
	}
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], k+"="); ok {
			return v, true
		}
	}
	return "", false
}

func listed(devs []gpu.Device) string { return strings.Join(indexes(devs), ", ") }

// indexes names every device by its index.
func indexes(devs []gpu.Device) []string {
	s := make([]string, len(devs))
	for i, d := range devs {
		s[i] = strconv.Itoa(d.Index)
	}
	return s
}

// gate is the lock's Options.Admit for a job that needs free memory: a
// device is admitted when the smaller of two readings a moment apart shows
// at least the job's need free, on every device it stands for (a single
// lock stands for the devices the job sees).
type gate struct {
	src  gpu.Source
	need gpu.MiB
	// visible are the devices a single lock stands for (nil: all).
	visible []string
	// lock, of backend, is inspected to say which gpuexec job a process
	// runs under.
	lock    lock.Options
	backend lock.Backend
	// reserve is Config.Reserve, for sharers.
	reserve gpu.MiB

	mu       sync.Mutex
	prev     []gpu.Device
	prevAt   time.Time
	procs    []gpu.Process
	procsAt  time.Time
	procsErr error
}

func newGate(cfg Config) *gate {
	return &gate{src: cfg.GPU, need: cfg.VRAM, visible: cfg.visibleDevices(), lock: cfg.Lock, backend: cfg.Backend, reserve: cfg.Reserve}
}

// admit is Options.Admit.
func (g *gate) admit(ctx context.Context, names []string) ([]bool, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ok := make([]bool, len(names))
	devs, err := g.sample(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return ok, fmt.Sprintf("%s free: the free memory was still being measured", g.need)
	case err != nil:
		return ok, fmt.Sprintf("%s free: the free memory is unknown (%v)", g.need, err)
	}
	why := ""
	for i, name := range names {
		targets := g.targets(name, devs)
		ok[i] = len(targets) > 0
		for _, target := range targets {
			d, found := gpu.Find(devs, target)
			if found && migWhy(d) == "" && d.Memory.Free.Known() && d.Memory.Free >= g.need {
				continue
			}
			ok[i] = false
			if why == "" {
				why = g.shortfall(ctx, target, d, found)
			}
			break
		}
	}
	return ok, why
}

// targets are the devices a lock named name stands for: that device, or
// for a single lock ("") those the job sees (all of devs when it sees
// every device).
func (g *gate) targets(name string, devs []gpu.Device) []string {
	switch {
	case name != "":
		return []string{name}
	case g.visible != nil:
		return g.visible
	}
	return indexes(devs)
}

// sample is the devices with each one's free memory the smaller of this
// reading and the one before: the previous reading when it is fresh, else
// a second one taken sampleGap later.
func (g *gate) sample(ctx context.Context) ([]gpu.Device, error) {
	cur, err := g.src.Devices(ctx)
	if err != nil {
		g.prev = nil
		return nil, err
	}
	prev := g.prev
	if prev == nil || time.Since(g.prevAt) > freshSample {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(sampleGap):
		}
		prev = cur
		if cur, err = g.src.Devices(ctx); err != nil {
			g.prev = nil
			return nil, err
		}
	}
	g.prev, g.prevAt = cur, time.Now()
	out := slices.Clone(cur)
	for i := range out {
		for _, p := range prev {
			if p.UUID == out[i].UUID {
				out[i].Memory.Free = smaller(out[i].Memory.Free, p.Memory.Free)
				if out[i].MIG == gpu.MIGOff {
					out[i].MIG = p.MIG // either reading in MIG mode (or unknown): so is the device
				}
			}
		}
	}
	return out, nil
}

// migWhy is why the memory figures of d do not say what a job on it can
// have ("it is in MIG mode ..."), "" when they do (a whole card).
func migWhy(d gpu.Device) string {
	switch d.MIG {
	case gpu.MIGOff:
		return ""
	case gpu.MIGOn:
		return "it is in MIG mode, where nvidia-smi gives the whole card's memory, not its instances'"
	}
	return "whether it is in MIG mode is unknown"
}

// smaller is the smaller figure; Unknown when either is.
func smaller(a, b gpu.MiB) gpu.MiB {
	if !a.Known() || !b.Known() {
		return gpu.Unknown
	}
	return min(a, b)
}

// shortfall is what the waiting line says of a device without room:
// "10.0 GiB on GPU 0: 3.1 GiB free; pid 4711 python (17.2 GiB) not under
// gpuexec".
func (g *gate) shortfall(ctx context.Context, name string, d gpu.Device, found bool) string {
	if !found {
		return fmt.Sprintf("%s on GPU %s: nvidia-smi does not list it now", g.need, name)
	}
	if why := migWhy(d); why != "" {
		return fmt.Sprintf("%s on GPU %d: %s", g.need, d.Index, why)
	}
	s := fmt.Sprintf("%s on GPU %d: %s free", g.need, d.Index, d.Memory.Free)
	if !d.Memory.Free.Known() {
		s = fmt.Sprintf("%s on GPU %d: its free memory is unknown", g.need, d.Index)
	}
	if time.Since(g.procsAt) > processesEvery {
		g.procs, g.procsErr = g.src.Processes(ctx)
		g.procsAt = time.Now()
	}
	if g.procsErr != nil {
		return s + "; its processes are unknown (" + g.procsErr.Error() + ")"
	}
	on := gpu.OnDevice(g.procs, d.UUID)
	if len(on) == 0 {
		return s
	}
	parts := describeProcesses(attributeByLock(on, g.backend, g.lock), 3)
	return s + "; " + strings.Join(parts, ", ")
}

// describeProcesses describes the n largest users of memory, and how many
// more there are.
func describeProcesses(ps []gpu.Attributed, n int) []string {
	slices.SortStableFunc(ps, func(a, b gpu.Attributed) int { return int(b.Used - a.Used) })
	var out []string
	for i, p := range ps {
		if i == n {
			out = append(out, fmt.Sprintf("%d more", len(ps)-n))
			break
		}
		out = append(out, p.Describe())
	}
	return out
}

// Attribute names the gpuexec job each process runs under, by the holders
// of the locks held, as Inspect judged them (Report.Locks), and by descent
// from any gpuexec. Only holders on this host count, and only a held
// lock's: a stale record's pid may be anyone's by now.
func Attribute(ps []gpu.Process, held []*lock.Status) []gpu.Attributed {
	jobs, groups := map[int]gpu.Job{}, map[int]int{}
	for _, st := range held {
		addSharers(jobs, groups, st.Sharers)
		// A stale record's holder is gone: its pid may be any
		// process's by now. A shared record names one of its sharers,
		// whose sidecars say whose processes are whose (see
		// lock.Sharer.Unattributed).
		if st.State != lock.StateHeld || st.Info == nil || st.Info.Share || !proc.SameHost(st.Info.Host) {
			continue
		}
		jobs[st.Info.PID] = gpu.Job{Owner: st.Info.Owner, Slug: st.Info.Slug, PID: st.Info.PID}
		if st.Info.ChildPGID > 0 {
			groups[st.Info.ChildPGID] = st.Info.PID
		}
	}
	return gpu.Attribute(ps, jobs, groups, ancestry{})
}

// attributeByLock is Attribute by the holders of the lock o (or its
// devices) of backend b (nil: lock.Files) as read now; the holders of a
// lock.Leased backend's lock, which stands for no GPU of this machine, are
// not looked for.
func attributeByLock(ps []gpu.Process, b lock.Backend, o lock.Options) []gpu.Attributed {
	var held []*lock.Status
	if machineLocal(b) {
		if r, err := lock.Inspect(lock.Options{Path: o.Path, Devices: o.Devices}); err == nil {
			held = r.Locks
		}
	}
	return Attribute(ps, held)
}

// ancestry reads the process table for gpu.Attribute.
type ancestry struct{}

func (ancestry) Parent(pid int) (int, bool) { return proc.Parent(pid) }
func (ancestry) Group(pid int) (int, bool) {
	st, ok := proc.ReadStat(pid)
	return st.PGRP, ok && st.PGRP > 0
}
func (ancestry) Name(pid int) string {
	st, _ := proc.ReadStat(pid)
	return st.Comm
}

// peak samples the video memory the job's processes use while it runs.
type peak struct {
	end     chan struct{}
	done    chan struct{}
	max     gpu.MiB
	sampled bool // some reading was had
	// unknown: a process of the job was listed without its memory
	// (Windows' WDDM).
	unknown bool
}

// watchPeak starts sampling for the job whose gpuexec is this process and
// whose process group is pgid; nil without a source.
func watchPeak(src gpu.Source, pgid int, bc *budgetCheck) *peak {
	if src == nil {
		return nil
	}
	p := &peak{end: make(chan struct{}), done: make(chan struct{})}
	self := os.Getpid()
	jobs := map[int]gpu.Job{self: {PID: self}}
	groups := map[int]int{}
	if pgid > 0 {
		groups[pgid] = self
	}
	go func() {
		defer close(p.done)
		t := time.NewTimer(peakFirst)
		defer t.Stop()
		for {
			select {
			case <-p.end:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-p.end:
					cancel()
				case <-ctx.Done():
				}
			}()
			ps, err := src.Processes(ctx)
			cancel()
			if err == nil {
				if sum, known := p.add(gpu.Attribute(ps, jobs, groups, ancestry{}), self); known {
					bc.reading(sum)
				}
			}
			t.Reset(peakEvery)
		}
	}()
	return p
}

// add takes one reading: the sum of the job's processes' memory (known
// false when a process of the job was listed without its memory).
func (p *peak) add(ps []gpu.Attributed, self int) (sum gpu.MiB, known bool) {
	known = true
	for _, a := range ps {
		if a.Job == nil || a.Job.PID != self {
			continue
		}
		if !a.Used.Known() {
			p.unknown, known = true, false
			continue
		}
		sum += a.Used
	}
	p.sampled = true
	p.max = max(p.max, sum)
	return sum, known
}

// stop ends the sampling and returns the fields for the "job exited" line:
// peak_vram_mib, or why there is no figure.
func (p *peak) stop() []any {
	if p == nil {
		return nil
	}
	close(p.end)
	<-p.done
	switch {
	case p.unknown:
		return []any{"peak_vram", "unknown (the driver does not report per-process memory)"}
	case p.sampled:
		return []any{"peak_vram_mib", int64(p.max)}
	}
	return nil
}
