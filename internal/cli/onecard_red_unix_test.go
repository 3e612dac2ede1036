//go:build unix

package cli

import (
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// A device's lock named by its path is that device exactly as --gpus N:
// where nvidia-smi answers, a gpuN.lock that names no GPU it lists is
// refused with the one line --gpus N gets, before the job runs.
func TestDeviceLockByPathNamesAListedGPU(t *testing.T) {
	t.Parallel()
	dir, _ := lockIn(t)
	c := newCard(t, frame([]gputest.GPU{gputest.RTX4090(0, gputest.UUID0, 0), gputest.RTX4090(1, gputest.UUID1, 0)}))
	r := gx(t, c.env(), "--lock", filepath.Join(dir, "gpu5.lock"), "--", "true")
	wantCode(t, r, 125)
	if len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, "names no GPU nvidia-smi lists (it lists 0, 1)") {
		t.Errorf("--lock gpu5.lock on a two-GPU machine: stderr %q, want the one line --gpus 5 gets", r.stderr)
	}
}

// A forced clear never starts a second job beside the first: the lock of a
// SIGKILLed holder whose job's leftover (still in the job's process group)
// closed its descriptors is held by that group, and clear --force, which
// removes the record naming it, must not make the card free while the
// leftover runs (its liveness file still notes the group).
func TestForcedClearOfAKilledHoldersLockWaitsForItsJob(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux-only")
	}
	_, lock := lockIn(t)
	p, pids := startShellJob(t, nil, []string{"--lock", lock, "--owner", "killed", "--slug", "job", "--poll", "100ms"}, leftoverScript)
	testsupport.AwaitChildPGID(t, long, lock, pids[0])
	killHolder(t, p, pids)
	wantCode(t, gx(t, nil, "--lock", lock, "clear", "--force"), 0)
	// The leftover sleeps for minutes (it is killed at cleanup).
	r := gx(t, nil, "--lock", lock, "--wait", "0", "--", "true")
	wantCode(t, r, 75)
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testsupport.Await(t, long, "the leftover to die", func() bool { return testsupport.Gone(pids[1]) })
	wantCode(t, gx(t, nil, "--lock", lock, "--wait", "10s", "--poll", "100ms", "--", "true"), 0)
}
