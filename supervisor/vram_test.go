package supervisor

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

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
