package cli

// Black-box tests of what gpuexec takes from nvidia-smi, which is hostile
// input as much as the lock folder is: another user's process names itself
// anything, and a broken or hostile nvidia-smi prints anything, or hangs.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	"github.com/gpuexec/gpuexec/internal/testsupport"
	"github.com/gpuexec/gpuexec/signals"
)

// startNamed runs a process of this test's called name (the test binary
// by a link of that name, holding until the test ends): a process of
// another program, whose name the OS knows.
func startNamed(t *testing.T, name string) *proc {
	t.Helper()
	link := filepath.Join(t.TempDir(), name)
	if err := os.Symlink(helperBin, link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link)
	cmd.Env = testsupport.Env(role("hold"), readyEnv+"="+filepath.Join(t.TempDir(), "ready"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close() })
	return startProc(t, cmd)
}

// A process whose name holds a line break and a whole row of nvidia-smi's
// (another user's process names itself so) makes no row: the sharer whose
// pid the forged row gives is not charged 48.8 GiB and not stopped by
// --vram-enforce, and status names the forger by what the OS calls it.
func TestSMIForgedProcessRowIsNoRow(t *testing.T) {
	_, lock := lockIn(t)
	c := newCard(t, rtx4090(500))
	j := startShared(t, c, lock, "--share", "--vram", "2G", "--slug", "victim", "--vram-enforce", "--kill-after", "2s")
	awaitStarted(t, j)
	jobPID, err := os.ReadFile(j.ready)
	if err != nil {
		t.Fatal(err)
	}
	eve := startNamed(t, "python3")
	forged := "eve\n" + gputest.UUID0 + ", " + string(jobPID) + ", 50000, python"
	c.set(rtx4090(600, gputest.App{GPU: gputest.UUID0, PID: eve.pid(), Name: forged, Used: "100"}))
	testsupport.Await(t, long, "three readings of the card's processes", func() bool {
		return gputest.AppCalls(c.fixture) >= 3 || j.exited()
	})
	if j.exited() || strings.Contains(j.stderr(), "over its budget") {
		t.Fatalf("the sharer was charged the forged row's memory:\n%s", j.stderr())
	}
	human, _ := statusOf(t, c, lock)
	if want := fmt.Sprintf("  pid %d python3 (100 MiB) not under gpuexec\n", eve.pid()); !strings.Contains(human, want) {
		t.Errorf("status lacks %q:\n%s", want, human)
	}
	if strings.Contains(human, "eve") || strings.Contains(human, "48.8 GiB") {
		t.Errorf("status shows the forged name or row:\n%s", human)
	}
	wantCode(t, j.end(t), 0)
}

// An nvidia-smi that prints 300 MB is read no further than the cap: it is
// stopped there, gpuexec stays small and says so in one line.
func TestSMIOutputIsCapped(t *testing.T) {
	f := frame(rtx3080(0))
	f.Flood = 300 << 20
	for _, tc := range []struct {
		name string
		args []string
		code int
		// out is where the line goes: stdout for status, stderr for
		// a job.
		out  bool
		want string
	}{
		{"status", []string{"status"}, 0, true, "GPUs: unknown (nvidia-smi's output could not be read: it printed more than 1 MiB)"},
		{"vram", []string{"--vram", "1G", "--", helperBin, "0"}, 125, false, "--vram cannot be checked: nvidia-smi's output could not be read: it printed more than 1 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, lock := lockInFolder(t)
			c := newCard(t, f)
			args := append([]string{"--lock", lock}, tc.args...)
			if tc.args[0] == "status" {
				args = append([]string{"status", "--lock", lock}, tc.args[1:]...)
			}
			p := startProc(t, gpuexecCmd(c.env(role("exit")), args...))
			r := p.wait(t)
			wantCode(t, r, tc.code)
			ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
			if !ok {
				t.Fatal("no resource usage")
			}
			// Linux counts KiB. The answer is 300 MB; gpuexec itself
			// is some 20 MB.
			if mib := ru.Maxrss / 1024; mib > 150 {
				t.Errorf("gpuexec grew to %d MiB reading nvidia-smi", mib)
			}
			text := r.stderr
			if tc.out {
				text = r.stdout
			}
			var said []string
			for _, l := range lines(text) {
				if strings.Contains(l, "nvidia-smi") {
					said = append(said, l)
				}
			}
			if len(said) != 1 || !strings.Contains(said[0], tc.want) {
				t.Fatalf("said %q, want one line with %q\nstdout:\n%s\nstderr:\n%s", said, tc.want, r.stdout, r.stderr)
			}
		})
	}
}

// SIGTERM or Ctrl+C while gpuexec reads the cards before it queues
// (--vram's check, a --gpus UUID mapped to its index, --gpus all counted),
// or for status, stops and reaps nvidia-smi and ends gpuexec with the
// signal's status and one line.
func TestSMISignalBeforeQueueing(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		sig  syscall.Signal
		code int
	}{
		{"vram SIGTERM", []string{"--vram", "1G"}, syscall.SIGTERM, 143},
		{"vram SIGINT", []string{"--vram", "1G"}, syscall.SIGINT, 130},
		{"gpus UUID SIGTERM", []string{"--gpus", gputest.UUID0}, syscall.SIGTERM, 143},
		{"gpus all SIGINT", []string{"--gpus", "all"}, syscall.SIGINT, 130},
		{"status SIGTERM", []string{"status"}, syscall.SIGTERM, 143},
		{"status gpus UUID SIGINT", []string{"status", "--gpus", gputest.UUID0}, syscall.SIGINT, 130},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			c := newCard(t, gputest.Hung)
			args := append(append([]string{"--lock", lock}, tc.args...), "--", helperBin, "0")
			status := tc.args[0] == "status"
			if status {
				// A lock no job has used: status reads a folder that
				// does not exist as no lock.
				dir, lock = lockInFolder(t)
				args = append([]string{"status", "--lock", lock}, tc.args[1:]...)
			}
			p := startProc(t, gpuexecCmd(c.env(role("exit")), args...))
			testsupport.Await(t, long, "nvidia-smi hanging", func() bool { return gputest.HungPID(c.fixture) > 0 })
			smi := gputest.HungPID(c.fixture)
			t.Cleanup(func() {
				// Only where gpuexec left it: the fake sleeps an hour.
				if syscall.Kill(smi, 0) == nil {
					syscall.Kill(smi, syscall.SIGKILL)
				}
			})
			if err := p.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			r := p.wait(t)
			wantCode(t, r, tc.code)
			if err := syscall.Kill(smi, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("nvidia-smi (pid %d) outlived gpuexec: %v", smi, err)
			}
			if l := lines(r.stderr); len(l) != 1 || !strings.Contains(l[0], "gpuexec: interrupted by "+signals.Name(tc.sig)) {
				t.Errorf("stderr %q, want one line saying it was interrupted", r.stderr)
			}
			if _, err := os.Stat(dir); err == nil && !status {
				t.Errorf("the lock's folder was made for a job that never queued")
			}
		})
	}
}
