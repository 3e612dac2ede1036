//go:build unix

package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

func init() {
	// gpu-critical: a job under --gpus. It checks that CUDA_VISIBLE_DEVICES
	// and GPUEXEC_GPU name one device whose lock names gpuexec (its
	// parent) as holder, proves it is alone on that device with a
	// non-blocking flock on $GPUEXEC_TEST_TRUTH/<device>, and appends the
	// device to $GPUEXEC_TEST_COUNT. Problems go to $GPUEXEC_TEST_OVERLAP.
	helperRoles["gpu-critical"] = func(args []string) int {
		bad := func(format string, a ...any) int {
			appendLine(os.Getenv(overlapEnv), fmt.Sprintf("pid %d: ", os.Getpid())+fmt.Sprintf(format, a...))
			return 1
		}
		dev := os.Getenv("CUDA_VISIBLE_DEVICES")
		if dev == "" || strings.Contains(dev, ",") || os.Getenv("GPUEXEC_GPU") != dev {
			return bad("CUDA_VISIBLE_DEVICES=%q GPUEXEC_GPU=%q", dev, os.Getenv("GPUEXEC_GPU"))
		}
		base := os.Getenv("GPUEXEC_LOCK_PATH")
		devLock := strings.TrimSuffix(base, ".lock") + dev + ".lock"
		var rec struct {
			PID int `json:"pid"`
		}
		if b, err := os.ReadFile(devLock); err != nil || json.Unmarshal(b, &rec) != nil || rec.PID != os.Getppid() {
			return bad("device %s's lock %s does not name gpuexec (pid %d) as holder: %v", dev, devLock, os.Getppid(), err)
		}
		f, err := os.OpenFile(filepath.Join(os.Getenv(truthEnv), dev), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return bad("%v", err)
		}
		defer f.Close()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			return bad("device %s already in use: %v", dev, err)
		}
		time.Sleep(2 * time.Millisecond) // the "render"
		if err := appendLine(os.Getenv(countEnv), dev); err != nil {
			return bad("%v", err)
		}
		return 0
	}
}

// TestGPUsContention: 16 contenders on 4 devices, 2 jobs each. Never two
// jobs on one device, every device used, each job's CUDA_VISIBLE_DEVICES
// names the device whose lock it holds.
func TestGPUsContention(t *testing.T) {
	t.Parallel()
	const procs, rounds = 16, 2
	dir, lock := lockIn(t)
	work := t.TempDir()
	overlap, count := filepath.Join(work, "overlap"), filepath.Join(work, "count")
	env := []string{role("gpu-critical"), truthEnv + "=" + work, overlapEnv + "=" + overlap, countEnv + "=" + count}
	runContenders(t, procs, rounds, 90*time.Second, env, func(i, j int) []string {
		return []string{"--lock", lock, "--gpus", "0,1,2,3", "--wait", "1m", "--slug", fmt.Sprintf("p%d-r%d", i, j), "--", helperBin}
	})
	if b, err := os.ReadFile(overlap); err == nil {
		t.Fatalf("jobs overlapped or saw the wrong device:\n%s", b)
	}
	f, err := os.Open(count)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	used := map[string]int{}
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); n++ {
		used[sc.Text()]++
	}
	if n != procs*rounds {
		t.Errorf("%d jobs ran, want %d", n, procs*rounds)
	}
	for _, d := range []string{"0", "1", "2", "3"} {
		if used[d] == 0 {
			t.Errorf("device %s never used: %v", d, used)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".guard") && !strings.HasSuffix(e.Name(), ".journal") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// A dead holder on one device does not block the others, and a live holder
// of one device by its own path is respected.
func TestGPUsDeadHolderDoesNotBlock(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	writeLock(t, filepath.Join(dir, "gpu0.lock"), seedRecord(testsupport.DeadPID(t), "ghost", "old", "0123456789abcdef"), 0)
	startHolder(t, filepath.Join(dir, "gpu1.lock"))
	work := t.TempDir()
	overlap, count := filepath.Join(work, "overlap"), filepath.Join(work, "count")
	env := []string{role("gpu-critical"), truthEnv + "=" + work, overlapEnv + "=" + overlap, countEnv + "=" + count}
	r := gx(t, env, "--lock", lock, "--gpus", "0,1", "--wait", "20s", "--", helperBin)
	wantCode(t, r, 0)
	if b, err := os.ReadFile(overlap); err == nil {
		t.Fatalf("job saw the wrong device: %s", b)
	}
	if b, err := os.ReadFile(count); err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Fatalf("job ran on %q (%v), want device 0, whose holder died", b, err)
	}
	if !strings.Contains(r.stderr, "cleared stale GPU lock") || !strings.Contains(r.stderr, "ghost/old") {
		t.Fatalf("the dead holder's lock was not cleared:\n%s", r.stderr)
	}
	st := gx(t, nil, "status", "--lock", lock, "--gpus", "0,1")
	wantCode(t, st, 0)
	if !strings.Contains(st.stdout, "GPU 0: free") || !strings.Contains(st.stdout, "GPU 1: held by "+holderOwner) {
		t.Fatalf("status --gpus:\n%s", st.stdout)
	}
}
