//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
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
