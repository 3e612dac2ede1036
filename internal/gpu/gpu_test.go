package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	"github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

func TestMain(m *testing.M) {
	gputest.Main()
	os.Exit(m.Run())
}

// fake is an SMI that runs this test binary as nvidia-smi, answering from
// a fixture the test writes.
func fake(t *testing.T, f gputest.Fixture) *SMI {
	t.Helper()
	fixture := filepath.Join(t.TempDir(), "fixture.json")
	gputest.Write(t, fixture, f)
	t.Setenv(gputest.Env, fixture)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &SMI{Path: self}
}

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want MiB
		err  string
	}{
		{"10G", 10240, ""},
		{"10GiB", 10240, ""},
		{"10gb", 10240, ""},
		{"512M", 512, ""},
		{"12000MiB", 12000, ""},
		{"1.5G", 1536, ""},
		{" 2G ", 2048, ""},
		{"10", 0, "has no unit"},
		{"", 0, "is not a size"},
		{"G", 0, "is not a size"},
		{"10T", 0, "the unit must be"},
		{"1.2.3G", 0, "is not a size"},
		{"0G", 0, "less than 1 MiB"},
		{"0.0001M", 0, "less than 1 MiB"},
		{"99999999999G", 0, "larger than any GPU"},
		{"-1G", 0, "is not a size"},
	} {
		got, err := ParseSize(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseSize(%q) = %d, %v; want an error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestMiBString(t *testing.T) {
	for m, want := range map[MiB]string{Unknown: "unknown", 0: "0 MiB", 1023: "1023 MiB", 1024: "1.0 GiB", 17612: "17.2 GiB"} {
		if got := m.String(); got != want {
			t.Errorf("MiB(%d) = %q, want %q", m, got, want)
		}
	}
	b, _ := json.Marshal(struct{ A, B MiB }{Unknown, 12})
	if string(b) != `{"A":null,"B":12}` {
		t.Errorf("JSON %s", b)
	}
}

func TestFind(t *testing.T) {
	devs := []Device{{Index: 0, UUID: gputest.UUID0}, {Index: 1, UUID: gputest.UUID1}}
	for _, c := range []struct {
		name string
		want int // -1: none
	}{
		{"0", 0}, {"1", 1}, {"2", -1}, {gputest.UUID1, 1}, {"GPU-5a6c", 0}, {"gpu-9E1F", 1},
		{"GPU-", -1}, {"", -1}, {"MIG-1234", -1},
	} {
		d, ok := Find(devs, c.name)
		if (c.want < 0) == ok || (ok && d.Index != c.want) {
			t.Errorf("Find(%q) = %d, %v; want %d", c.name, d.Index, ok, c.want)
		}
	}
}

func TestDevicesAndProcesses(t *testing.T) {
	self, dead := os.Getpid(), testsupport.DeadPID(t)
	odd := gputest.RTX3080(1, gputest.UUID1, 100)
	odd.Name = "NVIDIA GeForce RTX 3080, rev\x1b[31m"
	s := fake(t, gputest.Fixture{Frames: []gputest.Frame{{
		GPUs: []gputest.GPU{gputest.RTX3080(0, gputest.UUID0, 9000), odd},
		Apps: []gputest.App{
			{GPU: gputest.UUID0, PID: self, Name: "/usr/bin/python3", Used: "8800"},
			{GPU: gputest.UUID0, PID: dead, Name: "/opt/my, odd app/bin/render", Used: "100"},
			{GPU: gputest.UUID1, PID: self, Name: `C:\Program Files\Blender Foundation\Blender 4.1\blender.exe`, Used: "[N/A]"},
			{GPU: gputest.UUID1, PID: 0, Name: "[N/A]", Used: "[N/A]"},
		},
	}}})
	devs, err := s.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{Index: 0, UUID: gputest.UUID0, Name: "NVIDIA GeForce RTX 3080", Memory: Memory{Total: 10240, Used: 9000, Free: 1000, Reserved: 240}},
		{Index: 1, UUID: gputest.UUID1, Name: `NVIDIA GeForce RTX 3080, rev\x1b[31m`, Memory: Memory{Total: 10240, Used: 100, Free: 9900, Reserved: 240}},
	}
	if len(devs) != 2 || devs[0] != want[0] || devs[1] != want[1] {
		t.Fatalf("devices %+v\nwant %+v", devs, want)
	}
	ps, err := s.Processes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Names are the OS's, not the driver's: a process gone is "?".
	wantPs := []Process{
		{Device: gputest.UUID0, PID: self, Name: osName(t, self), Used: 8800},
		{Device: gputest.UUID0, PID: dead, Name: "?", Used: 100},
		{Device: gputest.UUID1, PID: self, Name: osName(t, self), Used: Unknown},
	}
	if len(ps) != len(wantPs) {
		t.Fatalf("processes %+v", ps)
	}
	for i := range ps {
		if ps[i] != wantPs[i] {
			t.Errorf("process %d = %+v, want %+v", i, ps[i], wantPs[i])
		}
	}
}

func TestUnknownMemory(t *testing.T) {
	g := gputest.RTX3080(0, gputest.UUID0, 0)
	g.Total, g.Used, g.Free = "[Not Supported]", "[N/A]", "[N/A]"
	s := fake(t, gputest.Fixture{Frames: []gputest.Frame{{GPUs: []gputest.GPU{g}}}})
	devs, err := s.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m := devs[0].Memory; m.Total.Known() || m.Used.Known() || m.Free.Known() {
		t.Errorf("memory %+v, want all unknown", m)
	}
}

func TestFailures(t *testing.T) {
	garbled := gputest.RTX3080(0, gputest.UUID0, 0)
	garbled.Free = "lots"
	for _, c := range []struct {
		name    string
		fixture gputest.Fixture
		want    error
		text    string
	}{
		{"no devices", gputest.NoDevices, ErrNoDevices, ""},
		{"no frames", gputest.Fixture{}, ErrNoDevices, ""},
		{"driver gone", gputest.DriverGone, ErrDriver, "couldn't communicate with the NVIDIA driver"},
		{"other failure", gputest.Fixture{Exit: 15, Stderr: "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error\n"}, ErrDriver, "Unknown Error"},
		{"garbled", gputest.Fixture{Frames: []gputest.Frame{{GPUs: []gputest.GPU{garbled}}}}, ErrOutput, `"lots"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := fake(t, c.fixture)
			_, err := s.Devices(context.Background())
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("error %v, want %v with %q", err, c.want, c.text)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error has several lines: %q", err)
			}
		})
	}
}

func TestHungIsAbandoned(t *testing.T) {
	s := fake(t, gputest.Hung)
	s.Timeout = 300 * time.Millisecond
	began := time.Now()
	_, err := s.Devices(context.Background())
	if !errors.Is(err, ErrHung) {
		t.Fatalf("error %v, want ErrHung", err)
	}
	// The bound is the contract; the slack is for a loaded machine.
	if took := time.Since(began); took > s.Timeout+5*time.Second {
		t.Errorf("took %s with a %s bound", took, s.Timeout)
	}
	if DefaultTimeout > 5*time.Second {
		t.Errorf("DefaultTimeout %s is over 5s", DefaultTimeout)
	}
}

func TestLocate(t *testing.T) {
	dir := t.TempDir()
	if _, err := Locate(filepath.Join(dir, "missing")); !errors.Is(err, ErrNoTool) {
		t.Errorf("a missing --nvidia-smi: %v", err)
	}
	if _, err := Locate(dir); !errors.Is(err, ErrNoTool) {
		t.Errorf("a folder as --nvidia-smi: %v", err)
	}
	t.Setenv("PATH", dir)
	if s, err := Locate(""); err == nil && !strings.HasPrefix(s.Path, "/usr") {
		t.Errorf("found %s on an empty PATH", s.Path)
	}
}

type table struct {
	parent map[int]int
	group  map[int]int
	name   map[int]string
}

func (t table) Parent(pid int) (int, bool) { p, ok := t.parent[pid]; return p, ok }
func (t table) Group(pid int) (int, bool)  { g, ok := t.group[pid]; return g, ok }
func (t table) Name(pid int) string        { return t.name[pid] }

func TestAttribute(t *testing.T) {
	// 100 gpuexec (holder channels/ep12) → 101 python → 102 worker;
	// 200 a daemon that left the tree but kept the job's group 101;
	// 300 gpuexec of another lock → 301 blender; 400 a shell → 401 python.
	up := table{
		parent: map[int]int{101: 100, 102: 101, 100: 1, 200: 1, 301: 300, 300: 1, 401: 400, 400: 1},
		group:  map[int]int{101: 101, 102: 101, 200: 101, 301: 301, 401: 400},
		name:   map[int]string{100: "gpuexec", 300: "gpuexec", 400: "bash"},
	}
	jobs := map[int]Job{100: {Owner: "channels", Slug: "ep12", PID: 100}}
	groups := map[int]int{101: 100}
	ps := []Process{{PID: 102, Name: "worker", Used: 5000}, {PID: 200, Name: "daemon", Used: 10}, {PID: 301, Name: "blender", Used: 2048}, {PID: 401, Name: "python", Used: 17612}}
	got := Attribute(ps, jobs, groups, up)
	want := []string{
		"pid 102 worker (4.9 GiB) under gpuexec channels/ep12 (pid 100)",
		"pid 200 daemon (10 MiB) under gpuexec channels/ep12 (pid 100)",
		"pid 301 blender (2.0 GiB) under gpuexec (pid 300)",
		"pid 401 python (17.2 GiB) not under gpuexec",
	}
	for i, a := range got {
		if d := a.Describe(); d != want[i] {
			t.Errorf("%d: %q, want %q", i, d, want[i])
		}
	}
	b, _ := json.Marshal(got[3])
	if string(b) != `{"pid":401,"name":"python","usedMiB":17612,"job":null}` {
		t.Errorf("JSON %s", b)
	}
	b, _ = json.Marshal(got[0])
	if string(b) != `{"pid":102,"name":"worker","usedMiB":5000,"job":{"owner":"channels","slug":"ep12","pid":100}}` {
		t.Errorf("JSON %s", b)
	}
}

func TestCards(t *testing.T) {
	devs := []Device{{Index: 0, UUID: gputest.UUID0, Name: "NVIDIA GeForce RTX 3080", Memory: Memory{Total: 10240, Used: 9000, Free: 1000, Reserved: 240}}}
	cards := Cards(devs, []Attributed{{Process: Process{Device: gputest.UUID0, PID: 7, Name: "python", Used: 8800}}, {Process: Process{Device: "GPU-other", PID: 8}}})
	want := "GPU 0 NVIDIA GeForce RTX 3080: 8.8 GiB of 10.0 GiB used, 1000 MiB free, 240 MiB reserved\n  pid 7 python (8.6 GiB) not under gpuexec"
	if got := cards[0].Describe(); got != want {
		t.Errorf("%q\nwant %q", got, want)
	}
	b, _ := json.Marshal(cards)
	if !strings.Contains(string(b), `"memory":{"totalMiB":10240,"usedMiB":9000,"freeMiB":1000,"reservedMiB":240},"mig":false,"processes":[{"pid":7`) {
		t.Errorf("JSON %s", b)
	}
	// Reserved unknown: not shown, null; MIG mode said, true or null.
	h100 := Card{Device: Device{Index: 1, Name: "NVIDIA H100 80GB HBM3", Memory: Memory{Total: 81559, Used: 30000, Free: 51017, Reserved: Unknown}, MIG: MIGOn}}
	if got, want := h100.Describe(), "GPU 1 NVIDIA H100 80GB HBM3: 29.3 GiB of 79.6 GiB used, 49.8 GiB free; in MIG mode: these figures are the whole card's, not its instances'"; got != want {
		t.Errorf("%q\nwant %q", got, want)
	}
	if b, _ := json.Marshal(h100.Device); !strings.Contains(string(b), `"reservedMiB":null},"mig":true`) {
		t.Errorf("JSON %s", b)
	}
	h100.MIG = MIGUnknown
	if got := h100.Describe(); !strings.HasSuffix(got, "49.8 GiB free; MIG mode unknown") {
		t.Errorf("%q", got)
	}
	if b, _ := json.Marshal(h100.Device); !strings.Contains(string(b), `"mig":null`) {
		t.Errorf("JSON %s", b)
	}
}

// What the card can ever have free: total less what the driver reserves.
func TestUsable(t *testing.T) {
	for _, c := range []struct {
		m    Memory
		want MiB
	}{
		{Memory{Total: 8192, Reserved: 614}, 7578},
		{Memory{Total: 8192, Reserved: Unknown}, 8192},
		{Memory{Total: Unknown, Reserved: 614}, Unknown},
		{Memory{Total: 8192}, 8192},
	} {
		if got := c.m.Usable(); got != c.want {
			t.Errorf("%+v: %d, want %d", c.m, got, c.want)
		}
	}
}

// memory.reserved and mig.mode.current as drivers give them, and as
// drivers too old to know them fail: asked again without the field, and
// from then on never with it.
func TestReservedAndMIG(t *testing.T) {
	naReserved := gputest.RTX3080(0, gputest.UUID0, 1000)
	naReserved.Reserved = "[N/A]"
	naAll := naReserved
	naAll.Free = "[N/A]"
	errMIG := gputest.H100(0, gputest.UUID0, 0, "[Unknown Error]")
	permMIG := gputest.H100(0, gputest.UUID0, 0, "[Insufficient Permissions]")
	for _, c := range []struct {
		name     string
		g        gputest.GPU
		reserved MiB
		mig      MIGMode
		dropped  []string // fields the SMI no longer asks for
	}{
		{"a recent GeForce", gputest.RTX3080(0, gputest.UUID0, 1000), 240, MIGOff, nil},
		{"an H100 in MIG mode", gputest.H100(0, gputest.UUID0, 30000, "Enabled"), 542, MIGOn, nil},
		{"an H100 without", gputest.H100(0, gputest.UUID0, 30000, "Disabled"), 542, MIGOff, nil},
		{"MIG unknown", errMIG, 542, MIGUnknown, nil},
		{"MIG not permitted", permMIG, 542, MIGUnknown, nil},
		{"reserved not reported: the rest of total", naReserved, 240, MIGOff, nil},
		{"reserved and free not reported", naAll, Unknown, MIGOff, nil},
		{"a driver older than memory.reserved", gputest.OldDriver(gputest.RTX3080(0, gputest.UUID0, 1000), false), 0, MIGOff, []string{fieldReserved}},
		{"an older H100 in MIG mode", gputest.OldDriver(gputest.H100(0, gputest.UUID0, 30000, "Enabled"), false), 0, MIGOn, []string{fieldReserved}},
		{"a driver older than MIG", gputest.OldDriver(gputest.RTX3080(0, gputest.UUID0, 1000), true), 0, MIGOff, []string{fieldReserved, fieldMIG}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := fake(t, gputest.Fixture{Frames: []gputest.Frame{{GPUs: []gputest.GPU{c.g}}}})
			for range 2 {
				devs, err := s.Devices(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if d := devs[0]; d.Memory.Reserved != c.reserved || d.MIG != c.mig {
					t.Fatalf("reserved %d, MIG %d; want %d, %d", d.Memory.Reserved, d.MIG, c.reserved, c.mig)
				}
				for _, f := range c.dropped {
					if slices.Contains(s.fields(), f) {
						t.Errorf("still asks for %s", f)
					}
				}
				if len(s.fields()) != len(gpuFields)-len(c.dropped) {
					t.Errorf("asks for %v", s.fields())
				}
			}
		})
	}
}

// A driver that refuses a field it must know, or one that refuses a field
// however it is asked (a wrapper that always says so), fails: no loop.
func TestRefusedFields(t *testing.T) {
	for _, c := range []struct{ name, field string }{{"a field it must know", "memory.free"}, {"an optional field, again and again", fieldReserved}} {
		t.Run(c.name, func(t *testing.T) {
			s := fake(t, gputest.Fixture{Exit: 2, Stdout: `Field "` + c.field + `" is not a valid field to query.` + "\n\n"})
			_, err := s.Devices(context.Background())
			if !errors.Is(err, ErrDriver) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %v", err)
			}
		})
	}
}

// A listing with two rows for one index, or one UUID twice, is ambiguous:
// an error, never the first of them.
func TestAmbiguousListing(t *testing.T) {
	full := gputest.RTX3080(0, gputest.UUID1, 10000-1)
	full.Free = "1"
	for _, c := range []struct {
		name string
		gpus []gputest.GPU
		text string
	}{
		{"two GPU 0", []gputest.GPU{gputest.RTX3080(0, gputest.UUID0, 0), full}, "its listing is ambiguous: two rows for GPU 0"},
		{"one UUID twice", []gputest.GPU{gputest.RTX3080(0, gputest.UUID0, 0), gputest.RTX3080(1, gputest.UUID0, 0)}, "its listing is ambiguous: GPU 0 and GPU 1 are both " + gputest.UUID0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := fake(t, gputest.Fixture{Frames: []gputest.Frame{{GPUs: c.gpus}}})
			devs, err := s.Devices(context.Background())
			if !errors.Is(err, ErrDriver) || !strings.Contains(err.Error(), c.text) || devs != nil {
				t.Fatalf("devices %+v, error %v; want ErrDriver with %q", devs, err, c.text)
			}
		})
	}
}

// A job whose command runs gpuexec again (reentrant: the lock is already
// held for it) is still the job that holds the lock: its processes, under
// the inner gpuexec and in the inner one's process group, are the outer
// job's, for status and for the outer job's peak memory.
func TestAttributeThroughANestedGpuexec(t *testing.T) {
	// 100 gpuexec (holder channels/ep12) → 101 sh → 102 gpuexec
	// (reentrant) → 103 python, in the group 103 the inner one made.
	up := table{
		parent: map[int]int{100: 1, 101: 100, 102: 101, 103: 102},
		group:  map[int]int{101: 101, 102: 101, 103: 103},
		name:   map[int]string{100: "gpuexec", 101: "sh", 102: "gpuexec", 103: "python"},
	}
	jobs := map[int]Job{100: {Owner: "channels", Slug: "ep12", PID: 100}}
	groups := map[int]int{101: 100}
	got := Attribute([]Process{{PID: 103, Name: "python", Used: 5000}}, jobs, groups, up)
	if d, want := got[0].Describe(), "pid 103 python (4.9 GiB) under gpuexec channels/ep12 (pid 100)"; d != want {
		t.Errorf("%q, want %q", d, want)
	}
}

// osName is what the OS calls pid.
func osName(t *testing.T, pid int) string {
	t.Helper()
	st, ok := proc.ReadStat(pid)
	if !ok || st.Comm == "" {
		t.Fatalf("no name for pid %d", pid)
	}
	return st.Comm
}

// Process names are whatever another user's program calls itself: one
// with a line break and a whole row of nvidia-smi's after it, or one that
// reads as nvidia-smi's own message, makes no row and hides nothing, as
// nvidia-smi is never asked for names.
func TestHostileProcessNames(t *testing.T) {
	self := os.Getpid()
	s := fake(t, gputest.Fixture{Frames: []gputest.Frame{{
		GPUs: []gputest.GPU{gputest.RTX3080(0, gputest.UUID0, 9000)},
		Apps: []gputest.App{
			{GPU: gputest.UUID0, PID: self, Name: "/home/eve/No devices were found", Used: "100"},
			{GPU: gputest.UUID0, PID: self, Name: "/home/eve/eve\n" + gputest.UUID0 + ", 4711, 50000, python", Used: "200"},
		},
	}}})
	ps, err := s.Processes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	name := osName(t, self)
	want := []Process{
		{Device: gputest.UUID0, PID: self, Name: name, Used: 100},
		{Device: gputest.UUID0, PID: self, Name: name, Used: 200},
	}
	if !slices.Equal(ps, want) {
		t.Fatalf("processes %+v, want %+v", ps, want)
	}
}

// An answer that is not the rows asked is an ErrOutput, never a row of
// another meaning, nor left out.
func TestProcessRowsAreStrict(t *testing.T) {
	u := gputest.UUID0
	self := os.Getpid()
	name := osName(t, self)
	for _, c := range []struct {
		name, raw string
		want      []Process // nil: an ErrOutput
	}{
		{"rows", fmt.Sprintf("%s, %d, 100\n%s, %d, [N/A]\r\n\n", u, self, u, self), []Process{{u, self, name, 100}, {u, self, name, Unknown}}},
		{"no process", "", []Process{}},
		{"vGPU guest", u + ", [N/A], [N/A]\n" + u + ", 0, 12\n", []Process{}},
		{"a name after the memory", fmt.Sprintf("%s, %d, 100, python\n", u, self), nil},
		{"a line of fewer fields", fmt.Sprintf("%s, %d, 100\n50000, python\n", u, self), nil},
		{"a pid that is no number", u + ", python, 100\n", nil},
		{"a negative pid", u + ", -4, 100\n", nil},
		{"a pid with a sign", u + ", +4, 100\n", nil},
		{"memory with a sign", fmt.Sprintf("%s, %d, +100\n", u, self), nil},
		{"a pid too large", u + ", 99999999999999999999, 100\n", nil},
		{"memory that is no number", fmt.Sprintf("%s, %d, lots\n", u, self), nil},
		{"a UUID with a space", fmt.Sprintf("GPU 1, %d, 100\n", self), nil},
		{"an empty UUID", fmt.Sprintf(", %d, 100\n", self), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := fake(t, gputest.Fixture{Raw: c.raw})
			if c.raw == "" {
				s = fake(t, gputest.Fixture{Frames: []gputest.Frame{{GPUs: []gputest.GPU{gputest.RTX3080(0, u, 0)}}}})
			}
			ps, err := s.Processes(context.Background())
			if c.want == nil {
				if !errors.Is(err, ErrOutput) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("processes %+v, error %v; want one line of ErrOutput", ps, err)
				}
				return
			}
			if err != nil || !slices.Equal(ps, c.want) {
				t.Fatalf("processes %+v, %v; want %+v", ps, err, c.want)
			}
		})
	}
}

// A device's row is read as strictly: a line of fewer fields is no part of
// the card's name before it.
func TestDeviceRowsAreStrict(t *testing.T) {
	row := "0, " + gputest.UUID0 + ", 10240, 0, 10000, 240, [N/A], NVIDIA GeForce RTX 3080\n"
	for _, c := range []struct{ name, raw string }{
		{"a line of fewer fields", row + "1, GPU-x, 10240\n"},
		{"a UUID with a space", strings.Replace(row, "GPU-", "GPU ", 1)},
		{"an index with a sign", "+" + row},
		{"an index too large", "99999999, " + row[3:]},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := fake(t, gputest.Fixture{Raw: c.raw})
			devs, err := s.Devices(context.Background())
			if !errors.Is(err, ErrOutput) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("devices %+v, error %v; want one line of ErrOutput", devs, err)
			}
		})
	}
}

// An nvidia-smi that prints more than the cap is stopped there: an
// ErrOutput that says so, and no more read.
func TestOutputIsCapped(t *testing.T) {
	f := gputest.Fixture{Frames: []gputest.Frame{{GPUs: []gputest.GPU{gputest.RTX3080(0, gputest.UUID0, 0)}}}, Flood: 64 << 20}
	s := fake(t, f)
	_, err := s.Devices(context.Background())
	if !errors.Is(err, ErrOutput) || !strings.Contains(err.Error(), "printed more than 1 MiB") {
		t.Fatalf("error %v, want an ErrOutput saying it printed too much", err)
	}
	// Just under the cap is read whole.
	row := "0, " + gputest.UUID0 + ", 10240, 0, 10000, 240, [N/A], NVIDIA GeForce RTX 3080\n"
	s = fake(t, gputest.Fixture{Raw: row + strings.Repeat("\n", maxOutput-len(row))})
	if devs, err := s.Devices(context.Background()); err != nil || len(devs) != 1 {
		t.Fatalf("an answer of exactly %d bytes: %+v, %v", maxOutput, devs, err)
	}
}

// --nvidia-smi with a name relative to the current folder is that file,
// not a command looked up on PATH.
func TestLocateRelative(t *testing.T) {
	fixture := filepath.Join(t.TempDir(), "fixture.json")
	gputest.Write(t, fixture, gputest.Fixture{Frames: []gputest.Frame{{GPUs: []gputest.GPU{gputest.RTX3080(0, gputest.UUID0, 0)}}}})
	t.Setenv(gputest.Env, fixture)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Dir(self))
	s, err := Locate(filepath.Base(self))
	if err != nil {
		t.Fatal(err)
	}
	if devs, err := s.Devices(context.Background()); err != nil || len(devs) != 1 {
		t.Fatalf("devices %+v, %v", devs, err)
	}
}

// A job's owner and slug come from its lock record, which anyone may
// write (the seed's Node tool takes any owner): a process's line in
// status shows them escaped, as the lock's own line does, never a
// terminal escape sequence, a newline or a bidirectional override.
func TestAttributedLineEscapesTheJobsNames(t *testing.T) {
	a := Attributed{Process: Process{PID: 103, Name: "python", Used: 5000},
		Job: &Job{Owner: "ev\x1b[2Jil", Slug: "a\nGPU 0 forged\u202e\xff", PID: 100}}
	want := `pid 103 python (4.9 GiB) under gpuexec ev\x1b[2Jil/a\nGPU 0 forged\u202e\xff (pid 100)`
	if d := a.Describe(); d != want {
		t.Errorf("%q, want %q", d, want)
	}
}
