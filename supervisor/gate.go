package supervisor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/lock"
)

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
// reading and the one before: the previous reading when it is fresh and
// no device has more free now than it said (memory freed since, by a job
// that ended: the previous reading is then the past, not a second look at
// the present), else a second one taken sampleGap later.
func (g *gate) sample(ctx context.Context) ([]gpu.Device, error) {
	cur, err := g.src.Devices(ctx)
	if err != nil {
		g.prev = nil
		return nil, err
	}
	prev := g.prev
	if prev == nil || time.Since(g.prevAt) > freshSample || freed(prev, cur) {
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

// freed reports whether a device of cur has more memory free than it had
// in prev.
func freed(prev, cur []gpu.Device) bool {
	for _, c := range cur {
		for _, p := range prev {
			if p.UUID == c.UUID && c.Memory.Free.Known() && p.Memory.Free.Known() && c.Memory.Free > p.Memory.Free {
				return true
			}
		}
	}
	return false
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
