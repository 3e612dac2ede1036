package supervisor

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/lock"
)

// readings is a gpu.Source that answers each Devices call with the next
// reading (the last repeats).
type readings struct {
	mu    sync.Mutex
	devs  [][]gpu.Device
	procs []gpu.Process
	err   error
	calls int
}

func (r *readings) Devices(context.Context) ([]gpu.Device, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	d := r.devs[min(r.calls, len(r.devs)-1)]
	r.calls++
	return slices.Clone(d), nil
}

func (r *readings) Processes(context.Context) ([]gpu.Process, error) { return r.procs, nil }

func dev(index int, free gpu.MiB) gpu.Device {
	return gpu.Device{Index: index, UUID: "GPU-" + string(rune('a'+index)), Name: "card", Memory: gpu.Memory{Total: 10240, Used: 10000 - free, Free: free}}
}

func TestVisibleDevices(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want []string
	}{
		{[]string{"A=1"}, nil},
		{[]string{EnvCUDA + "=1"}, []string{"1"}},
		{[]string{EnvCUDA + "= 0, GPU-5a6c ,"}, []string{"0", "GPU-5a6c"}},
		{[]string{EnvCUDA + "="}, []string{}},
		{[]string{EnvCUDA + "=0", EnvCUDA + "=1"}, []string{"1"}},
	} {
		got := Config{Env: c.env}.visibleDevices()
		if (got == nil) != (c.want == nil) || !slices.Equal(got, c.want) {
			t.Errorf("%v: %q, want %q", c.env, got, c.want)
		}
	}
}

func TestGateAdmits(t *testing.T) {
	lockPath := filepath.Join(t.TempDir(), "gpu.lock")
	for _, c := range []struct {
		name     string
		readings [][]gpu.Device
		visible  []string
		names    []string
		want     []bool
		why      string
	}{
		{"room on the one card", [][]gpu.Device{{dev(0, 5000)}}, nil, []string{""}, []bool{true}, ""},
		{"one reading without room", [][]gpu.Device{{dev(0, 5000)}, {dev(0, 1000)}}, nil, []string{""}, []bool{false}, "4.0 GiB on GPU 0: 1000 MiB free"},
		{"one reading with room", [][]gpu.Device{{dev(0, 1000)}, {dev(0, 5000)}}, nil, []string{""}, []bool{false}, "4.0 GiB on GPU 0: 1000 MiB free"},
		{"every card it sees", [][]gpu.Device{{dev(0, 5000), dev(1, 100)}}, nil, []string{""}, []bool{false}, "4.0 GiB on GPU 1: 100 MiB free"},
		{"only the cards it sees", [][]gpu.Device{{dev(0, 5000), dev(1, 100)}}, []string{"0"}, []string{""}, []bool{true}, ""},
		{"devices one by one", [][]gpu.Device{{dev(0, 100), dev(1, 5000)}}, nil, []string{"0", "1"}, []bool{false, true}, "4.0 GiB on GPU 0: 100 MiB free"},
		{"unknown is not free", [][]gpu.Device{{func() gpu.Device { d := dev(0, 0); d.Memory.Free = gpu.Unknown; return d }()}}, nil, []string{""}, []bool{false}, "4.0 GiB on GPU 0: its free memory is unknown"},
		{"a device gone", [][]gpu.Device{{dev(0, 5000)}}, nil, []string{"3"}, []bool{false}, "4.0 GiB on GPU 3: nvidia-smi does not list it now"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := &gate{src: &readings{devs: c.readings}, need: 4096, visible: c.visible, lock: lock.Options{Path: lockPath}}
			ok, why := g.admit(context.Background(), c.names)
			if !slices.Equal(ok, c.want) || why != c.why {
				t.Errorf("admit = %v, %q; want %v, %q", ok, why, c.want, c.why)
			}
		})
	}
}

func TestGateNamesWhoIsInTheWay(t *testing.T) {
	src := &readings{
		devs: [][]gpu.Device{{dev(0, 1000)}},
		procs: []gpu.Process{
			{Device: "GPU-a", PID: 1 << 30, Name: "small", Used: 10},
			{Device: "GPU-a", PID: 1<<30 + 1, Name: "python", Used: 17612},
			{Device: "GPU-b", PID: 1<<30 + 2, Name: "elsewhere", Used: 9000},
			{Device: "GPU-a", PID: 1<<30 + 3, Name: "mid", Used: 2048},
			{Device: "GPU-a", PID: 1<<30 + 4, Name: "tiny", Used: 1},
		},
	}
	g := &gate{src: src, need: 4096, lock: lock.Options{Path: filepath.Join(t.TempDir(), "gpu.lock")}}
	_, why := g.admit(context.Background(), []string{""})
	want := "4.0 GiB on GPU 0: 1000 MiB free; pid 1073741825 python (17.2 GiB) not under gpuexec, pid 1073741827 mid (2.0 GiB) not under gpuexec, pid 1073741824 small (10 MiB) not under gpuexec, 1 more"
	if why != want {
		t.Errorf("why %q\nwant %q", why, want)
	}
	src.err = errors.New("nvidia-smi did not answer within 4s")
	g.prev = nil
	if ok, why := g.admit(context.Background(), []string{""}); ok[0] || !strings.Contains(why, "the free memory is unknown (nvidia-smi did not answer") {
		t.Errorf("a failed reading: %v, %q", ok, why)
	}
}

func TestPeakSums(t *testing.T) {
	self := 42
	job := &gpu.Job{PID: self}
	other := &gpu.Job{PID: 7}
	p := &peak{}
	p.add([]gpu.Attributed{{Process: gpu.Process{Used: 1000}, Job: job}, {Process: gpu.Process{Used: 500}, Job: job}, {Process: gpu.Process{Used: 9000}, Job: other}, {Process: gpu.Process{Used: 9000}}}, self)
	p.add([]gpu.Attributed{{Process: gpu.Process{Used: 1200}, Job: job}}, self)
	p.end, p.done = make(chan struct{}), make(chan struct{})
	close(p.done)
	if got := p.stop(); !slices.Equal(got, []any{"peak_vram_mib", int64(1500)}) {
		t.Errorf("fields %v", got)
	}
	q := &peak{end: make(chan struct{}), done: make(chan struct{})}
	close(q.done)
	if got := q.stop(); got != nil {
		t.Errorf("no reading: fields %v", got)
	}
	var none *peak
	if none.stop() != nil {
		t.Error("nil peak")
	}
}

// card is a device as a recent driver lists it: total = used + free +
// reserved, used in use, a whole card.
func card(index int, total, reserved, used gpu.MiB) gpu.Device {
	return gpu.Device{Index: index, UUID: "GPU-" + string(rune('a'+index)), Name: "card",
		Memory: gpu.Memory{Total: total, Used: used, Free: total - reserved - used, Reserved: reserved}}
}

func inMIG(d gpu.Device, m gpu.MIGMode) gpu.Device { d.MIG = m; return d }

// CheckGPUs refuses, before the queue, a size the card can never free
// (its total less what the driver reserves; for a sharer less the reserve
// too) and a card in MIG mode, whose figures are not an instance's.
func TestCheckGPUsReservedAndMIG(t *testing.T) {
	rtx2080 := card(0, 8192, 614, 0) // 8 GiB, as the RTX 2080 Super
	h100 := card(1, 81559, 542, 0)
	for _, c := range []struct {
		name    string
		devs    []gpu.Device
		vram    gpu.MiB
		share   bool
		devices []string
		need    int
		err     string // "" = accepted
	}{
		{"within what the card can free", []gpu.Device{rtx2080}, 7578, false, nil, 0, ""},
		{"the card's total, less reserved", []gpu.Device{rtx2080}, 8192, false, nil, 0, "8.0 GiB can never be free: GPU 0 has 7.4 GiB (8.0 GiB less 614 MiB reserved by the driver)"},
		{"reserved unknown: the total", []gpu.Device{func() gpu.Device { d := rtx2080; d.Memory.Reserved = gpu.Unknown; return d }()}, 8192, false, nil, 0, ""},
		{"over the total, nothing reserved", []gpu.Device{card(0, 8192, 0, 0)}, 8193, false, nil, 0, "8.0 GiB can never be free: GPU 0 has 8.0 GiB in all"},
		{"a sharer: less reserved and the reserve", []gpu.Device{rtx2080}, 7100, true, nil, 0, "6.9 GiB can never be free: GPU 0 has 6.9 GiB to share (8.0 GiB less 614 MiB reserved by the driver and a 512 MiB reserve)"},
		{"a sharer within", []gpu.Device{rtx2080}, 7066, true, nil, 0, ""},
		{"MIG", []gpu.Device{inMIG(h100, gpu.MIGOn)}, 30381, false, nil, 0, "cannot be checked on GPU 1: in MIG mode nvidia-smi gives the whole card's memory, not that of the MIG instance a job runs in; run the job without --vram and --share (the lock alone keeps jobs apart), or turn MIG off (nvidia-smi -i 1 -mig 0)"},
		{"MIG, a sharer", []gpu.Device{inMIG(h100, gpu.MIGOn)}, 1024, true, nil, 0, "cannot be checked on GPU 1: in MIG mode"},
		{"MIG unknown", []gpu.Device{inMIG(h100, gpu.MIGUnknown)}, 1024, false, nil, 0, "cannot be checked: GPU 1 (card) does not say whether it is in MIG mode"},
		{"one card in MIG among those it sees", []gpu.Device{rtx2080, inMIG(h100, gpu.MIGOn)}, 1024, false, nil, 0, "cannot be checked on GPU 1: in MIG mode"},
		{"a device set: another card fits", []gpu.Device{rtx2080, inMIG(h100, gpu.MIGOn)}, 1024, false, []string{"0", "1"}, 0, ""},
		{"a device set all in MIG", []gpu.Device{inMIG(card(0, 81559, 542, 0), gpu.MIGOn), inMIG(h100, gpu.MIGOn)}, 1024, false, []string{"0", "1"}, 0, "cannot be checked on GPU 0, 1: in MIG mode nvidia-smi gives the whole card's memory, not that of the MIG instance a job runs in; run the job without --vram and --share (the lock alone keeps jobs apart), or turn MIG off (nvidia-smi -i 0,1 -mig 0)"},
		{"a device set, --need 2, one in MIG", []gpu.Device{rtx2080, inMIG(h100, gpu.MIGOn)}, 1024, false, []string{"0", "1"}, 2, "1.0 GiB can never be free on 2 GPUs at once (--need 2): GPU 1 is in MIG mode"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{GPU: &readings{devs: [][]gpu.Device{c.devs}}, VRAM: c.vram, Share: c.share, Env: []string{"A=1"},
				Lock: lock.Options{Path: filepath.Join(t.TempDir(), "gpu.lock"), Devices: c.devices, Need: c.need}}
			err := cfg.CheckGPUs(context.Background())
			var oe *lock.OptionError
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.err != "" && (!errors.As(err, &oe) || oe.Option != "vram" || !strings.HasPrefix(oe.Problem, c.err)):
				t.Fatalf("error %v\nwant --vram %q", err, c.err)
			}
		})
	}
}

// The gate never admits a card in MIG mode, nor one whose MIG mode is
// unknown, in either of the two readings (a card switched to MIG while
// the job waits).
func TestGateNeverAdmitsMIG(t *testing.T) {
	whole := card(0, 81559, 542, 0)
	for _, c := range []struct {
		name     string
		readings [][]gpu.Device
		why      string
	}{
		{"in MIG mode", [][]gpu.Device{{inMIG(whole, gpu.MIGOn)}}, "4.0 GiB on GPU 0: it is in MIG mode, where nvidia-smi gives the whole card's memory, not its instances'"},
		{"switched to MIG between the readings", [][]gpu.Device{{whole}, {inMIG(whole, gpu.MIGOn)}}, "4.0 GiB on GPU 0: it is in MIG mode"},
		{"in MIG mode in the first reading", [][]gpu.Device{{inMIG(whole, gpu.MIGOn)}, {whole}}, "4.0 GiB on GPU 0: it is in MIG mode"},
		{"MIG mode unknown", [][]gpu.Device{{inMIG(whole, gpu.MIGUnknown)}}, "4.0 GiB on GPU 0: whether it is in MIG mode is unknown"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lockPath := filepath.Join(t.TempDir(), "gpu.lock")
			g := &gate{src: &readings{devs: c.readings}, need: 4096, lock: lock.Options{Path: lockPath}}
			ok, why := g.admit(context.Background(), []string{""})
			if ok[0] || !strings.HasPrefix(why, c.why) {
				t.Errorf("admit = %v, %q; want refused, %q", ok, why, c.why)
			}
			g = &gate{src: &readings{devs: c.readings}, need: 4096, lock: lock.Options{Path: lockPath}}
			ok, why = g.admitShared(context.Background(), []lock.Candidate{{}})
			if want := strings.Replace(c.why, " on GPU", " shared on GPU", 1); ok[0] || !strings.HasPrefix(why, want) {
				t.Errorf("admitShared = %v, %q; want refused, %q", ok, why, want)
			}
		})
	}
}

// The share gate counts what the driver reserves: sharers can never have
// it. On the 8 GiB card (614 MiB reserved, 512 MiB reserve) a
// budget of 6.5 GiB leaves 412 MiB beside it, not 1 GiB.
func TestShareCountsReserved(t *testing.T) {
	d := card(0, 8192, 614, 100)
	sharers := []lock.Sharer{{PID: 1 << 30, MiB: 4096}}
	room, known := ShareRoom(d, sharers, nil, 0)
	if want := gpu.MiB(8192 - 614 - 512 - 4096 - 100); !known || room != want {
		t.Errorf("ShareRoom = %d, %v; want %d", room, known, want)
	}
	g := &gate{src: &readings{devs: [][]gpu.Device{{d}}}, need: 2900, lock: lock.Options{Path: filepath.Join(t.TempDir(), "gpu.lock")}}
	ok, why := g.admitShared(context.Background(), []lock.Candidate{{Sharers: sharers}})
	want := "2.8 GiB shared on GPU 0: budgets 4.0 GiB (1 sharer(s)) + 100 MiB in use by others + 2.8 GiB > 6.9 GiB (8.0 GiB less 614 MiB reserved by the driver and a 512 MiB reserve)"
	if ok[0] || why != want {
		t.Errorf("admitShared = %v, %q\nwant %q", ok, why, want)
	}
	g.need = 2870
	if ok, why := g.admitShared(context.Background(), []lock.Candidate{{Sharers: sharers}}); !ok[0] {
		t.Errorf("a budget that fits: %q", why)
	}
	// What the driver reserves unknown: nothing is known to fit.
	d.Memory.Reserved = gpu.Unknown
	if _, known := ShareRoom(d, sharers, nil, 0); known {
		t.Error("ShareRoom known with reserved unknown")
	}
	if _, known := ShareRoom(inMIG(card(0, 8192, 614, 100), gpu.MIGOn), sharers, nil, 0); known {
		t.Error("ShareRoom known in MIG mode")
	}
}

// A sharer whose processes are not taken for its own (its sidecar names
// another user's, lock.Sharer.Unattributed) still counts its budget, but
// the memory of what it names stays in use by others: counted twice when
// it is truly its job's (its job took uid 0 with sudo), never moved into
// a small budget (a member's sidecar naming someone else's hog).
func TestShareOfAnUnattributedSharer(t *testing.T) {
	d := card(0, 24564, 342, 3500)
	ps := []gpu.Process{{Device: d.UUID, PID: os.Getpid(), Name: "python3", Used: 3000}}
	for _, c := range []struct {
		name         string
		unattributed string
		other        gpu.MiB // what is in use by others
	}{
		{"its processes its own", "", 500},
		{"its processes not its own", "its file is uid 1001's but names pid 1, which runs as uid 0", 3500},
	} {
		t.Run(c.name, func(t *testing.T) {
			sharers := []lock.Sharer{{PID: os.Getpid(), MiB: 1, Unattributed: c.unattributed}}
			room, known := ShareRoom(d, sharers, ps, 0)
			reserve := reserveOf(0, d.Memory.Total)
			if want := d.Memory.Total - d.Memory.Reserved - reserve - 1 - c.other; !known || room != want {
				t.Errorf("ShareRoom = %d, %v; want %d (%s in use by others)", room, known, want, c.other)
			}
		})
	}
}

// A reading that shows memory freed since the last one (a job ended) is
// paired with one taken a moment later, not with that last one: a job
// waiting for the memory starts then, not at its next ask; both readings
// must still show the room.
func TestGateReadsAgainWhenMemoryWasFreed(t *testing.T) {
	for _, c := range []struct {
		name string
		next [][]gpu.Device
		want bool
	}{
		{"freed and still free", [][]gpu.Device{{dev(0, 5000)}, {dev(0, 5000)}}, true},
		{"freed, then taken again", [][]gpu.Device{{dev(0, 5000)}, {dev(0, 1000)}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := &readings{devs: [][]gpu.Device{{dev(0, 1000)}, {dev(0, 1000)}}}
			g := &gate{src: src, need: 4096, lock: lock.Options{Path: filepath.Join(t.TempDir(), "gpu.lock")}}
			if ok, _ := g.admit(context.Background(), []string{""}); ok[0] {
				t.Fatal("admitted with 1000 MiB free")
			}
			src.mu.Lock()
			src.devs = append(src.devs, c.next...)
			src.mu.Unlock()
			ok, why := g.admit(context.Background(), []string{""})
			if ok[0] != c.want {
				t.Fatalf("admit = %v (%q), want %v", ok[0], why, c.want)
			}
			if src.calls != 4 {
				t.Errorf("%d readings, want 4", src.calls)
			}
		})
	}
}

func TestHoldLimit(t *testing.T) {
	for _, c := range []struct {
		timeout, killAfter, want time.Duration
	}{
		{0, 10 * time.Second, 0},
		{time.Minute, 10 * time.Second, time.Minute + 10*time.Second},
		{time.Minute, 0, time.Minute},
		{time.Minute, Forever, 0},
		{math.MaxInt64 - time.Hour, 2 * time.Hour, math.MaxInt64},
	} {
		if got := holdLimit(Config{Timeout: c.timeout, KillAfter: c.killAfter}); got != c.want {
			t.Errorf("holdLimit(timeout %s, kill-after %s) = %s, want %s", c.timeout, c.killAfter, got, c.want)
		}
	}
}
