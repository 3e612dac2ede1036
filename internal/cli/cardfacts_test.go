package cli

// Black-box tests of the card facts that real drivers give and a naive
// reading gets wrong: memory the driver reserves (never free), a card in
// MIG mode (whose figures are the whole card's), and a listing that names
// one card twice.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
)

// rtx2080Super is an 8 GiB GeForce RTX 2080 SUPER as a recent driver lists
// it: 8192 MiB total, of which 614 reserved by the driver and firmware.
func rtx2080Super(used int) gputest.GPU {
	return gputest.GPU{Index: "0", UUID: gputest.UUID0, Name: "NVIDIA GeForce RTX 2080 SUPER", BusID: "00000000:01:00.0",
		Total: "8192", Used: strconv.Itoa(used), Free: strconv.Itoa(8192 - 614 - used), Reserved: "614", MIG: "[N/A]"}
}

// wantRefusedAtOnce is a gpuexec refused at once: 125, one line with want on
// stderr, the job not run and the lock's folder not made (never queued).
func wantRefusedAtOnce(t *testing.T, r result, dir, want string) {
	t.Helper()
	wantCode(t, r, 125)
	if l := lines(r.stderr); len(l) != 1 || !strings.Contains(l[0], want) {
		t.Fatalf("stderr %q, want one line with %q", r.stderr, want)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("the lock's folder was made for a job refused at once")
	}
}

// Memory the driver reserves is never free: --vram of the card's total is
// refused at once, not queued for --wait; a sharer's room
// is the total less reserved and less the reserve; status shows it.
func TestReservedMemoryIsNeverFree(t *testing.T) {
	c := newCard(t, frame([]gputest.GPU{rtx2080Super(0)}))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--vram", "8G"}, "--vram 8.0 GiB can never be free: GPU 0 has 7.4 GiB (8.0 GiB less 614 MiB reserved by the driver)"},
		{[]string{"--share", "--vram", "7100M"}, "--vram 6.9 GiB can never be free: GPU 0 has 6.9 GiB to share (8.0 GiB less 614 MiB reserved by the driver and a 512 MiB reserve)"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			r := gx(t, c.env(role("exit")), append(append([]string{"--lock", lock, "--wait", "2s"}, tc.args...), "--", helperBin, "0")...)
			wantRefusedAtOnce(t, r, dir, tc.want)
		})
	}
	t.Run("status", func(t *testing.T) {
		t.Parallel()
		_, lock := lockInFolder(t)
		r := gx(t, c.env(), "status", "--lock", lock)
		wantCode(t, r, 0)
		if want := "GPU 0 NVIDIA GeForce RTX 2080 SUPER: 0 MiB of 8.0 GiB used, 7.4 GiB free, 614 MiB reserved\n"; !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
		r = gx(t, c.env(), "status", "--lock", lock, "--json")
		wantCode(t, r, 0)
		if want := `"memory":{"totalMiB":8192,"usedMiB":0,"freeMiB":7578,"reservedMiB":614},"mig":false`; !strings.Contains(r.stdout, want) {
			t.Errorf("status --json lacks %s: %s", want, r.stdout)
		}
	})
}

// The share gate counts what the driver reserves: on the 8 GiB card with a
// 4G sharer, a 2.9G sharer would leave the reserve short by what the
// driver keeps, so it waits (and defers at --wait), saying so.
func TestShareCountsReservedMemory(t *testing.T) {
	_, lock := lockIn(t)
	c := newCard(t, frame([]gputest.GPU{rtx2080Super(100)}))
	a := startShared(t, c, lock, "--share", "--vram", "4G", "--slug", "a")
	awaitStarted(t, a)
	r := gx(t, c.env(role("exit")), "--lock", lock, "--share", "--vram", "2900M", "--wait", "3s", "--report", "1s", "--", helperBin, "0")
	wantCode(t, r, 75)
	want := "2.8 GiB shared on GPU 0: budgets 4.0 GiB (1 sharer(s)) + 100 MiB in use by others + 2.8 GiB > 6.9 GiB (8.0 GiB less 614 MiB reserved by the driver and a 512 MiB reserve)"
	if !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "job started") {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
	}
	human, _ := statusOf(t, c, lock)
	if want := "GPU 0 shared: 4.0 GiB of budgets, 2.8 GiB left to share"; !strings.Contains(human, want) {
		t.Errorf("status lacks %q:\n%s", want, human)
	}
	js := gx(t, c.env(), "status", "--lock", lock, "--json")
	if want := `"budgetFreeMiB":` + strconv.Itoa(8192-614-512-4096-100); !strings.Contains(js.stdout, want) {
		t.Errorf("status --json lacks %s: %s", want, js.stdout)
	}
	wantCode(t, a.end(t), 0)
	wantNoLock(t, lock)
}

// A driver that does not know memory.reserved (older than R510) is asked
// without it: --vram works, and what is neither used nor free counts as
// reserved (none, on those drivers, whose used includes it); one that
// does not know mig.mode.current predates MIG: a whole card.
func TestOlderDrivers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		g      gputest.GPU
		status string
	}{
		{"no memory.reserved", gputest.OldDriver(gputest.RTX3080(0, gputest.UUID0, 1000), false), "GPU 0 NVIDIA GeForce RTX 3080: 1.2 GiB of 10.0 GiB used, 8.8 GiB free, 0 MiB reserved\n"},
		{"no mig.mode.current", gputest.OldDriver(gputest.RTX3080(0, gputest.UUID0, 1000), true), "GPU 0 NVIDIA GeForce RTX 3080: 1.2 GiB of 10.0 GiB used, 8.8 GiB free, 0 MiB reserved\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, lock := lockIn(t)
			c := newCard(t, frame([]gputest.GPU{tc.g}))
			r := gx(t, c.env(role("exit")), "--lock", lock, "--vram", "4G", "--wait", "1m", "--", helperBin, "0")
			wantCode(t, r, 0)
			r = gx(t, c.env(), "status", "--lock", lock)
			wantCode(t, r, 0)
			if !strings.Contains(r.stdout, tc.status) {
				t.Errorf("status lacks %q:\n%s", tc.status, r.stdout)
			}
		})
	}
}

// h100MIG is an H100 in MIG mode whose whole-card figures show 31017 MiB
// free, more than any of its instances has.
func h100MIG() []gputest.GPU {
	return []gputest.GPU{gputest.H100(0, gputest.UUID0, 50000, "Enabled")}
}

// A card in MIG mode is never read as one whole card: --vram and --share
// on it are refused at once, saying what to do; status says
// that it is in MIG mode.
func TestMIGIsRefused(t *testing.T) {
	c := newCard(t, frame(h100MIG()))
	const want = "--vram cannot be checked on GPU 0: in MIG mode nvidia-smi gives the whole card's memory, not that of the MIG instance a job runs in; run the job without --vram and --share (the lock alone keeps jobs apart), or turn MIG off (nvidia-smi -i 0 -mig 0)"
	for _, args := range [][]string{{"--vram", "30381M"}, {"--share", "--vram", "1G"}, {"--gpus", "0", "--vram", "1G"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			r := gx(t, c.env(role("exit")), append(append([]string{"--lock", lock, "--wait", "2s"}, args...), "--", helperBin, "0")...)
			wantRefusedAtOnce(t, r, dir, want)
		})
	}
	t.Run("a MIG mode not reported", func(t *testing.T) {
		t.Parallel()
		dir, lock := lockIn(t)
		c := newCard(t, frame([]gputest.GPU{gputest.H100(0, gputest.UUID0, 0, "[Unknown Error]")}))
		r := gx(t, c.env(role("exit")), "--lock", lock, "--vram", "1G", "--", helperBin, "0")
		wantRefusedAtOnce(t, r, dir, "--vram cannot be checked: GPU 0 (NVIDIA H100 80GB HBM3) does not say whether it is in MIG mode")
	})
	t.Run("status", func(t *testing.T) {
		t.Parallel()
		_, lock := lockInFolder(t)
		r := gx(t, c.env(), "status", "--lock", lock)
		wantCode(t, r, 0)
		if want := "GPU 0 NVIDIA H100 80GB HBM3: 48.8 GiB of 79.6 GiB used, 30.3 GiB free, 542 MiB reserved; in MIG mode: these figures are the whole card's, not its instances'\n"; !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
		r = gx(t, c.env(), "status", "--lock", lock, "--json")
		if !strings.Contains(r.stdout, `"reservedMiB":542},"mig":true`) {
			t.Errorf("status --json: %s", r.stdout)
		}
	})
}

// A card switched to MIG mode while a job waits for its memory is never
// admitted: the job keeps waiting, says why, and defers at --wait.
func TestMIGWhileWaiting(t *testing.T) {
	_, lock := lockIn(t)
	full := gputest.H100(0, gputest.UUID0, 81000, "Disabled")
	c := newCard(t, gputest.Fixture{Frames: []gputest.Frame{{GPUs: []gputest.GPU{full}}, {GPUs: h100MIG()}}})
	out := filepath.Join(t.TempDir(), "out")
	r := gx(t, c.env(role("cuda"), outEnv+"="+out), "--lock", lock, "--vram", "20G", "--wait", "3s", "--report", "1s", "--", helperBin)
	wantCode(t, r, 75)
	if want := "20.0 GiB on GPU 0: it is in MIG mode, where nvidia-smi gives the whole card's memory, not its instances'"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("the job started on a card in MIG mode")
	}
	wantNoLock(t, lock)
}

// A listing with two rows for one index (the second full), or one UUID
// twice, is a failing driver, never the first row: refused at once, and
// while waiting a failed reading that keeps the job waiting.
func TestAmbiguousListingNeverStarts(t *testing.T) {
	second := gputest.RTX3080(0, gputest.UUID1, 9990)
	second.Free = "10"
	twoZeros := []gputest.GPU{gputest.RTX3080(0, gputest.UUID0, 0), second}
	sameUUID := []gputest.GPU{gputest.RTX3080(0, gputest.UUID0, 0), gputest.RTX3080(1, gputest.UUID0, 0)}
	for _, tc := range []struct {
		name string
		gpus []gputest.GPU
		args []string
		want string
	}{
		{"two GPU 0", twoZeros, []string{"--vram", "4G"}, "--vram cannot be checked: nvidia-smi failed: its listing is ambiguous: two rows for GPU 0"},
		{"two GPU 0, --gpus 0", twoZeros, []string{"--gpus", "0", "--vram", "4G"}, "--vram cannot be checked: nvidia-smi failed: its listing is ambiguous: two rows for GPU 0"},
		{"two GPU 0, --share", twoZeros, []string{"--share", "--vram", "4G"}, "--vram cannot be checked: nvidia-smi failed: its listing is ambiguous: two rows for GPU 0"},
		{"one UUID twice", sameUUID, []string{"--vram", "4G"}, "--vram cannot be checked: nvidia-smi failed: its listing is ambiguous: GPU 0 and GPU 1 are both " + gputest.UUID0},
		{"--gpus all", twoZeros, []string{"--gpus", "all"}, "--gpus all needs --gpu-count N (or GPUEXEC_GPU_COUNT) or a working nvidia-smi to count the GPUs: nvidia-smi failed: its listing is ambiguous: two rows for GPU 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			c := newCard(t, frame(tc.gpus))
			r := gx(t, c.env(role("exit")), append(append([]string{"--lock", lock, "--wait", "2s"}, tc.args...), "--", helperBin, "0")...)
			wantRefusedAtOnce(t, r, dir, tc.want)
		})
	}
	t.Run("while waiting", func(t *testing.T) {
		t.Parallel()
		_, lock := lockIn(t)
		c := newCard(t, gputest.Fixture{Frames: []gputest.Frame{{GPUs: rtx3080(0)}, {GPUs: twoZeros}}})
		out := filepath.Join(t.TempDir(), "out")
		r := gx(t, c.env(role("cuda"), outEnv+"="+out), "--lock", lock, "--vram", "4G", "--wait", "3s", "--report", "1s", "--", helperBin)
		wantCode(t, r, 75)
		if want := "4.0 GiB free: the free memory is unknown (nvidia-smi failed: its listing is ambiguous: two rows for GPU 0)"; !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("the job started on an ambiguous listing")
		}
		wantNoLock(t, lock)
	})
	t.Run("status", func(t *testing.T) {
		t.Parallel()
		_, lock := lockInFolder(t)
		c := newCard(t, frame(twoZeros))
		r := gx(t, c.env(), "status", "--lock", lock)
		wantCode(t, r, 0)
		if want := "GPUs: unknown (nvidia-smi failed: its listing is ambiguous: two rows for GPU 0)"; !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	})
}
