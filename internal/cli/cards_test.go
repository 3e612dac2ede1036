package cli

// Black-box tests of what gpuexec reads from the cards, against a fake
// nvidia-smi: this test binary, answering from a fixture the test rewrites
// (see gputest).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	procs "github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

func init() {
	// cuda: write what CUDA would read ($CUDA_VISIBLE_DEVICES,
	// $CUDA_DEVICE_ORDER, $GPUEXEC_GPU) to $GPUEXEC_TEST_OUT.
	helperRoles["cuda"] = func([]string) int {
		s := fmt.Sprintf("visible=%s order=%s gpu=%s", os.Getenv("CUDA_VISIBLE_DEVICES"), os.Getenv("CUDA_DEVICE_ORDER"), os.Getenv("GPUEXEC_GPU"))
		if err := testsupport.WriteAtomic(os.Getenv(outEnv), []byte(s)); err != nil {
			fmt.Fprintln(os.Stderr, "helper cuda:", err)
			return 2
		}
		return 0
	}
}

// card is a fake nvidia-smi's fixture and the environment that has
// gpuexec use it.
type card struct {
	t       *testing.T
	fixture string
}

func newCard(t *testing.T, f gputest.Fixture) *card {
	t.Helper()
	c := &card{t: t, fixture: filepath.Join(t.TempDir(), "smi.json")}
	c.set(f)
	return c
}

func (c *card) set(f gputest.Fixture) { gputest.Write(c.t, c.fixture, f) }

// env has gpuexec run this test binary as nvidia-smi.
func (c *card) env(extra ...string) []string {
	return append([]string{gputest.Env + "=" + c.fixture, "GPUEXEC_NVIDIA_SMI=" + helperBin}, extra...)
}

func frame(gpus []gputest.GPU, apps ...gputest.App) gputest.Fixture {
	return gputest.Fixture{Frames: []gputest.Frame{{GPUs: gpus, Apps: apps}}}
}

func rtx3080(used int) []gputest.GPU { return []gputest.GPU{gputest.RTX3080(0, gputest.UUID0, used)} }

// A job with --vram waits while a process outside gpuexec holds the
// memory, names it while it waits, and starts once the memory is free.
func TestVRAMWaitsForAForeignProcess(t *testing.T) {
	_, lock := lockIn(t)
	// A process gone by the time it is named: the OS has no name for it.
	foreign := testsupport.DeadPID(t)
	python := gputest.App{GPU: gputest.UUID0, PID: foreign, Name: "/usr/bin/python3", Used: "8800"}
	c := newCard(t, frame(rtx3080(9000), python))
	out := filepath.Join(t.TempDir(), "out")
	p := startProc(t, gpuexecCmd(c.env(role("cuda"), outEnv+"="+out),
		"--lock", lock, "--vram", "4G", "--report", "1s", "--wait", "1m", "--", helperBin))
	want := fmt.Sprintf("waiting for 4.0 GiB on GPU 0: 1000 MiB free; pid %d ? (8.6 GiB) not under gpuexec; position 1 of 1; waited ", foreign)
	testsupport.Await(t, long, "the waiting line", func() bool { return strings.Contains(p.stderr(), want) })
	if _, err := os.Stat(out); err == nil {
		t.Fatal("the job started without the memory")
	}
	c.set(frame(rtx3080(1000)))
	r := p.wait(t)
	wantCode(t, r, 0)
	// Without --gpus the devices are not named, but CUDA numbers them as
	// nvidia-smi does, in which the memory was checked.
	if b, _ := os.ReadFile(out); string(b) != "visible= order=PCI_BUS_ID gpu=" {
		t.Errorf("a job without --gpus sees %q", b)
	}
	// An order the user chose is kept.
	r = gx(t, c.env(role("cuda"), outEnv+"="+out, "CUDA_DEVICE_ORDER=FASTEST_FIRST"), "--lock", lock, "--vram", "4G", "--", helperBin)
	wantCode(t, r, 0)
	if b, _ := os.ReadFile(out); string(b) != "visible= order=FASTEST_FIRST gpu=" {
		t.Errorf("with CUDA_DEVICE_ORDER set, the job sees %q", b)
	}
}

// The decision takes the smaller of two readings: one reading with room
// does not start the job; one reading without room only delays it.
func TestVRAMOneBlip(t *testing.T) {
	low, high := rtx3080(9000), rtx3080(1000)
	frames := func(gs ...[]gputest.GPU) gputest.Fixture {
		var f gputest.Fixture
		for _, g := range gs {
			f.Frames = append(f.Frames, gputest.Frame{GPUs: g})
		}
		return f
	}
	t.Run("up", func(t *testing.T) {
		t.Parallel()
		_, lock := lockIn(t)
		c := newCard(t, frames(low, high, low))
		r := gx(t, c.env(role("exit")), "--lock", lock, "--vram", "4G", "--wait", "3s", "--", helperBin, "0")
		wantCode(t, r, 75)
		if !strings.Contains(r.stderr, "gave up waiting for free video memory") || strings.Contains(r.stderr, "job started") {
			t.Fatalf("stderr:\n%s", r.stderr)
		}
	})
	t.Run("down", func(t *testing.T) {
		t.Parallel()
		_, lock := lockIn(t)
		c := newCard(t, frames(high, low, high))
		r := gx(t, c.env(role("exit")), "--lock", lock, "--vram", "4G", "--wait", "1m", "--", helperBin, "0")
		wantCode(t, r, 0)
		if n := gputest.Calls(c.fixture); n < 4 {
			t.Errorf("started after %d readings; the low one must have counted", n)
		}
	})
}

// With --gpus the job takes the first device in queue order that has the
// memory; --gpus all counts the devices with nvidia-smi; CUDA numbers them
// as nvidia-smi does.
func TestVRAMWithGPUs(t *testing.T) {
	_, lock := lockIn(t)
	gpus := []gputest.GPU{
		gputest.RTX4090(0, gputest.UUID0, 20000),
		gputest.RTX4090(1, gputest.UUID1, 100),
		gputest.RTX4090(2, "GPU-00000000-0000-0000-0000-000000000002", 100),
	}
	c := newCard(t, frame(gpus))
	out := filepath.Join(t.TempDir(), "out")
	r := gx(t, c.env(role("cuda"), outEnv+"="+out), "--lock", lock, "--gpus", "all", "--vram", "10G", "--", helperBin)
	wantCode(t, r, 0)
	if b, _ := os.ReadFile(out); string(b) != "visible=1 order=PCI_BUS_ID gpu=1" {
		t.Errorf("the job sees %q, want GPU 1 (the first with 10G free) in PCI order\n%s", b, r.stderr)
	}
	// By UUID, as CUDA_VISIBLE_DEVICES takes them: the lock, and what
	// the job sees, is the GPU's index (one card, one lock).
	r = gx(t, c.env(role("cuda"), outEnv+"="+out), "--lock", lock, "--gpus", gputest.UUID0+","+gputest.UUID1, "--vram", "10G", "--", helperBin)
	wantCode(t, r, 0)
	if b, _ := os.ReadFile(out); string(b) != "visible=1 order=PCI_BUS_ID gpu=1" {
		t.Errorf("the job sees %q\n%s", b, r.stderr)
	}
}

// --wait 0 with a free lock but not the memory: deferred, saying why.
func TestVRAMWaitZeroDefers(t *testing.T) {
	_, lock := lockIn(t)
	c := newCard(t, frame(rtx3080(9000)))
	r := gx(t, c.env(role("exit")), "--lock", lock, "--vram", "2G", "--wait", "0", "--", helperBin, "0")
	wantCode(t, r, 75)
	// (Under Wine, starting the fake for the process list can fail: the
	// line then says the processes are unknown.)
	if !strings.Contains(r.stderr, "not enough free video memory: needs 2.0 GiB on GPU 0: 1000 MiB free;") || !strings.Contains(r.stderr, "; not waiting (--wait 0): job deferred") {
		t.Errorf("stderr:\n%s", r.stderr)
	}
	wantNoLock(t, lock)
}

// Without --vram and without --gpus, a job runs no nvidia-smi on its way
// to the start, and one that ends within a second none at all.
func TestNoGPUFactsNoNvidiaSMI(t *testing.T) {
	_, lock := lockIn(t)
	c := newCard(t, frame(rtx3080(0)))
	r := gx(t, c.env(role("exit")), "--lock", lock, "--", helperBin, "0")
	wantCode(t, r, 0)
	if n, m := gputest.Calls(c.fixture), gputest.AppCalls(c.fixture); n+m != 0 {
		t.Errorf("nvidia-smi ran %d+%d times for a job that asked nothing of the GPU", n, m)
	}
}

func TestGPUFactsFailures(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nvidia-smi")
	unsupported := rtx3080(0)
	unsupported[0].Free, unsupported[0].Used, unsupported[0].Total = "[N/A]", "[N/A]", "[Not Supported]"
	for _, tc := range []struct {
		name    string
		fixture gputest.Fixture
		args    []string
		noSMI   bool // nvidia-smi is nowhere
		stderr  string
	}{
		{"vram without nvidia-smi", frame(rtx3080(0)), []string{"--vram", "1G"}, true, "--vram needs nvidia-smi: no nvidia-smi found on PATH"},
		{"vram with a missing --nvidia-smi", frame(rtx3080(0)), []string{"--vram", "1G", "--nvidia-smi", missing}, false, fmt.Sprintf("--nvidia-smi %q: no nvidia-smi found", missing)},
		{"vram without a unit", frame(rtx3080(0)), []string{"--vram", "10"}, false, `--vram: "10" has no unit; use 10G, 512M or 12000MiB`},
		{"vram of nothing", frame(rtx3080(0)), []string{"--vram", "0G"}, false, `--vram: "0G" is less than 1 MiB`},
		{"driver gone", gputest.DriverGone, []string{"--vram", "1G"}, false, "--vram cannot be checked: nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"},
		{"no devices", gputest.NoDevices, []string{"--vram", "1G"}, false, "--vram cannot be checked: nvidia-smi found no GPU"},
		{"hung", gputest.Hung, []string{"--vram", "1G"}, false, "--vram cannot be checked: nvidia-smi did not answer within 4s"},
		{"memory not reported", frame(unsupported), []string{"--vram", "1G"}, false, "--vram cannot be checked: GPU 0 (NVIDIA GeForce RTX 3080) does not report its free memory"},
		{"no such GPU", frame(rtx3080(0)), []string{"--vram", "1G", "--gpus", "0,3"}, false, `--gpus: "3" names no GPU nvidia-smi lists (it lists 0)`},
		{"no such GPU, without --vram", frame(rtx3080(0)), []string{"--gpus", "1"}, false, `--gpus: "1" names no GPU nvidia-smi lists (it lists 0)`},
		{"no such GPU UUID", frame(rtx3080(0)), []string{"--gpus", "GPU-ffff"}, false, `--gpus: "GPU-ffff" names no GPU nvidia-smi lists (it lists 0)`},
		{"CUDA sees no GPU", frame(rtx3080(0)), []string{"--vram", "1G"}, false, `--vram cannot be checked: nvidia-smi lists no GPU "7" (it lists 0)`},
		{"gpus all without nvidia-smi", frame(rtx3080(0)), []string{"--gpus", "all"}, true, "--gpus all needs --gpu-count N (or GPUEXEC_GPU_COUNT) or a working nvidia-smi to count the GPUs: no nvidia-smi found"},
		{"vram over the card's size", frame(rtx3080(0)), []string{"--vram", "11G"}, false, "--vram 11.0 GiB can never be free: GPU 0 has 9.8 GiB (10.0 GiB less 240 MiB reserved by the driver)"},
		{"vram over every device's size", frame([]gputest.GPU{gputest.RTX3080(0, gputest.UUID0, 0), gputest.RTX3080(1, gputest.UUID1, 0)}), []string{"--vram", "12000M", "--gpus", "all"}, false, "--vram 11.7 GiB can never be free: GPU 0 has 9.8 GiB (10.0 GiB less 240 MiB reserved by the driver), GPU 1 has 9.8 GiB (10.0 GiB less 240 MiB reserved by the driver)"},
		{"vram over all but one of the devices --need takes", frame([]gputest.GPU{gputest.RTX3080(0, gputest.UUID0, 0), gputest.RTX4090(1, gputest.UUID1, 0)}), []string{"--vram", "11G", "--gpus", "0,1", "--need", "2"}, false, "--vram 11.0 GiB can never be free on 2 GPUs at once (--need 2): GPU 0 has 9.8 GiB (10.0 GiB less 240 MiB reserved by the driver)"},
		{"vram with etcd", frame(rtx3080(0)), []string{"--vram", "1G", "--lock", "etcd://127.0.0.1:1/gpu"}, false, "--vram is checked on this machine's GPUs, so it needs a lock file, not an etcd:// lock"},
		{"gpus all with a failing driver", gputest.DriverGone, []string{"--gpus", "all"}, false, "--gpus all needs --gpu-count N (or GPUEXEC_GPU_COUNT) or a working nvidia-smi to count the GPUs: nvidia-smi failed: NVIDIA-SMI has failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			c := newCard(t, tc.fixture)
			env := c.env(role("exit"))
			if tc.name == "CUDA sees no GPU" {
				env = append(env, "CUDA_VISIBLE_DEVICES=7")
			}
			if tc.noSMI {
				env = []string{role("exit"), "PATH=" + t.TempDir()}
			}
			r := gx(t, env, append(append([]string{"--lock", lock}, tc.args...), "--", helperBin, "0")...)
			wantCode(t, r, 125)
			if l := lines(r.stderr); len(l) != 1 || !strings.Contains(l[0], tc.stderr) {
				t.Fatalf("stderr %q, want one line with %q", r.stderr, tc.stderr)
			}
			if _, err := os.Stat(dir); err == nil {
				t.Errorf("the lock's folder was made for a job refused at once")
			}
		})
	}
}

// status shows each card, its memory and its processes, with the gpuexec
// job each runs under; JSON has them under "gpus".
func TestStatusShowsTheCards(t *testing.T) {
	_, lock := lockIn(t)
	h := startHolder(t, lock)
	ready := filepath.Join(t.TempDir(), "ready")
	// The holder's job: the fake names it by the pid its hold role wrote.
	jobPID := strings.TrimSpace(h.readyPID(t))
	if err := os.WriteFile(ready, []byte(jobPID), 0o644); err != nil {
		t.Fatal(err)
	}
	// Names are the OS's: the job's is this test binary's; a process
	// gone has none.
	foreign := testsupport.DeadPID(t)
	c := newCard(t, frame(
		[]gputest.GPU{gputest.RTX4090(0, gputest.UUID0, 18000), gputest.RTX4090(1, gputest.UUID1, 0)},
		gputest.App{GPU: gputest.UUID0, PIDFile: ready, Name: "/usr/bin/python3", Used: "12000"},
		gputest.App{GPU: gputest.UUID0, PID: foreign, Name: "/opt/comfyui/venv/bin/python", Used: "5600"},
	))
	jobName := osName(t, jobPID)
	r := gx(t, c.env(), "status", "--lock", lock)
	wantCode(t, r, 0)
	for _, want := range []string{
		"GPU 0 NVIDIA GeForce RTX 4090: 17.6 GiB of 24.0 GiB used, 6.1 GiB free, 342 MiB reserved",
		fmt.Sprintf("  pid %s %s (11.7 GiB) under gpuexec %s/%s (pid %d)", jobPID, jobName, holderOwner, holderSlug, h.p.pid()),
		fmt.Sprintf("  pid %d ? (5.5 GiB) not under gpuexec", foreign),
		"GPU 1 NVIDIA GeForce RTX 4090: 0 MiB of 24.0 GiB used, 23.7 GiB free, 342 MiB reserved",
	} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	r = gx(t, c.env(), "status", "--lock", lock, "--json")
	wantCode(t, r, 0)
	var got struct {
		GPUs []struct {
			Index  int    `json:"index"`
			UUID   string `json:"uuid"`
			Name   string `json:"name"`
			Memory struct {
				Total, Used, Free *int64
			} `json:"memory"`
			Processes []struct {
				PID  int    `json:"pid"`
				Name string `json:"name"`
				Used *int64 `json:"usedMiB"`
				Job  *struct {
					Owner, Slug string
					PID         int
				} `json:"job"`
			} `json:"processes"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(got.GPUs) != 2 || got.GPUs[0].UUID != gputest.UUID0 || got.GPUs[1].Index != 1 || len(got.GPUs[0].Processes) != 2 || len(got.GPUs[1].Processes) != 0 {
		t.Fatalf("gpus: %s", r.stdout)
	}
	if !strings.Contains(r.stdout, `"memory":{"totalMiB":24564,"usedMiB":18000,"freeMiB":6222,"reservedMiB":342},"mig":false`) {
		t.Errorf("memory: %s", r.stdout)
	}
	job, other := got.GPUs[0].Processes[0], got.GPUs[0].Processes[1]
	if job.Job == nil || job.Job.Owner != holderOwner || job.Job.Slug != holderSlug || job.Job.PID != h.p.pid() || *job.Used != 12000 {
		t.Errorf("the holder's job: %+v in %s", job, r.stdout)
	}
	if other.Job != nil || other.PID != foreign || other.Name != "?" || job.Name != jobName {
		t.Errorf("the processes: %+v, %+v", job, other)
	}

	// A failing driver: said, never taken for no GPU; no nvidia-smi at
	// all: nothing said.
	c.set(gputest.DriverGone)
	r = gx(t, c.env(), "status", "--lock", lock)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "GPUs: unknown (nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate") {
		t.Errorf("status with a failing driver:\n%s", r.stdout)
	}
	r = gx(t, c.env(), "status", "--lock", lock, "--json")
	if !strings.Contains(r.stdout, `"gpusError":"nvidia-smi failed: NVIDIA-SMI has failed`) || strings.Contains(r.stdout, `"gpus"`) {
		t.Errorf("JSON with a failing driver: %s", r.stdout)
	}
	r = gx(t, []string{"PATH=" + t.TempDir()}, "status", "--lock", lock, "--json")
	wantCode(t, r, 0)
	if strings.Contains(r.stdout, `"gpus`) {
		t.Errorf("JSON without nvidia-smi: %s", r.stdout)
	}
}

// The job's peak video memory is in the "job exited" line and the JSON
// log; where the driver does not report per-process memory, that is said.
func TestPeakVRAM(t *testing.T) {
	for _, tc := range []struct {
		name, used, text string
		json             any
	}{
		{"reported", "5324", "peak_vram_mib=5324", float64(5324)},
		{"WDDM", "[N/A]", `peak_vram="unknown (the driver does not report per-process memory)"`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			ready := filepath.Join(t.TempDir(), "ready")
			c := newCard(t, frame(rtx3080(6000), gputest.App{GPU: gputest.UUID0, PIDFile: ready, Name: "/usr/bin/python3", Used: tc.used}))
			log := filepath.Join(dir+"-log", "gpuexec.log")
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd := gpuexecCmd(c.env(role("hold"), readyEnv+"="+ready), "--lock", lock, "--log", log, "--log-json", "--", helperBin)
			cmd.Stdin = r
			p := startProc(t, cmd)
			r.Close()
			testsupport.Await(t, long, "two samples of the job's memory", func() bool { return gputest.AppCalls(c.fixture) >= 2 })
			w.Close()
			res := p.wait(t)
			wantCode(t, res, 0)
			exited := ""
			for _, l := range lines(res.stderr) {
				if strings.Contains(l, "job exited") {
					exited = l
				}
			}
			if !strings.Contains(exited, tc.text) {
				t.Errorf("job exited line %q lacks %q", exited, tc.text)
			}
			b, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, l := range lines(string(b)) {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) == nil && m["@message"] == "job exited" {
					found = true
					if tc.json != nil && m["peak_vram_mib"] != tc.json {
						t.Errorf("JSON peak_vram_mib = %v, want %v: %s", m["peak_vram_mib"], tc.json, l)
					}
				}
			}
			if !found {
				t.Errorf("no job exited line in the JSON log:\n%s", b)
			}
		})
	}
}

// osName is what the OS calls pid (a decimal), as gpuexec names a GPU's
// processes.
func osName(t *testing.T, pid string) string {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(pid))
	if err != nil {
		t.Fatal(err)
	}
	st, ok := procs.ReadStat(n)
	if !ok || st.Comm == "" {
		t.Fatalf("no name for pid %d", n)
	}
	return st.Comm
}

// readyPID is the pid the holder's job wrote.
func (h *holder) readyPID(t *testing.T) string {
	t.Helper()
	for _, a := range h.p.cmd.Env {
		if v, ok := strings.CutPrefix(a, readyEnv+"="); ok {
			b, err := os.ReadFile(v)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
	t.Fatal("no ready file")
	return ""
}

// The nvidia-smi that samples the job's memory is gpuexec's own child, not
// the job's: one still running when the job's command ends (a slow or hung
// driver) is neither reported as a process the job left behind nor
// stopped with the job's leftovers, and does not hold up the release.
func TestPeakSamplerIsNotTheJobs(t *testing.T) {
	_, lock := lockIn(t)
	ready := filepath.Join(t.TempDir(), "ready")
	c := newCard(t, gputest.Hung)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := gpuexecCmd(c.env(role("hold"), readyEnv+"="+ready), "--lock", lock, "--kill-after", "1m", "--", helperBin)
	cmd.Stdin = r
	p := startProc(t, cmd)
	r.Close()
	testsupport.Await(t, long, "the sampler's nvidia-smi running", func() bool { return gputest.Hanging(c.fixture) })
	w.Close()
	res := p.wait(t)
	wantCode(t, res, 0)
	if strings.Contains(res.stderr, "left processes behind") {
		t.Errorf("the sampler's nvidia-smi taken for the job's:\n%s", res.stderr)
	}
}

// A stale lock's record names a holder that is gone: the pid it gives may
// be any process's by now, which is then not a job of that record.
func TestStatusStaleHolderIsNoJob(t *testing.T) {
	_, lock := lockIn(t)
	// The fake lists a process by the pid the gone holder had (a
	// process that got it since; whether it runs does not matter).
	pid := testsupport.DeadPID(t)
	writeLock(t, lock, seedRecord(pid, "ghost", "old", "0123456789abcdef"), 24*time.Hour)
	c := newCard(t, frame(rtx3080(9000), gputest.App{GPU: gputest.UUID0, PID: pid, Name: "/usr/bin/python3", Used: "8800"}))
	r := gx(t, c.env(), "status", "--lock", lock)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "stale") {
		t.Fatalf("the lock is not stale:\n%s", r.stdout)
	}
	if want := fmt.Sprintf("  pid %d ? (8.6 GiB) not under gpuexec\n", pid); !strings.Contains(r.stdout, want) {
		t.Errorf("status lacks %q:\n%s", want, r.stdout)
	}
}

// A process list that cannot be read leaves the cards shown, saying so.
func TestStatusCardsWithoutProcesses(t *testing.T) {
	_, lock := lockInFolder(t)
	f := frame(rtx3080(9000))
	f.AppsFail = "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error\n"
	c := newCard(t, f)
	r := gx(t, c.env(), "status", "--lock", lock)
	wantCode(t, r, 0)
	for _, want := range []string{"GPU 0 NVIDIA GeForce RTX 3080: 8.8 GiB of 10.0 GiB used, 1000 MiB free, 240 MiB reserved\n", "GPU processes unknown: nvidia-smi failed: Unable to determine the device handle"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	r = gx(t, c.env(), "status", "--lock", lock, "--json")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, `"processes":null`) || !strings.Contains(r.stdout, `"gpusError":"processes unknown: nvidia-smi failed: Unable to determine`) || !strings.Contains(r.stdout, `"freeMiB":1000`) {
		t.Errorf("JSON: %s", r.stdout)
	}
}
