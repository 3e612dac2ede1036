package lock

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// ExistingDevices finds the device locks beside a path by their names
// alone: regular files only, sidecars, links, folders and names no device
// can have (a UUID, leading zeros, letters) skipped; in device order.
func TestExistingDevices(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpu.lock")
	for _, n := range []string{"gpu0.lock", "gpu1.lock", "gpu10.lock", "gpu2.lock", "gpuGPU-ab.lock", "gpuA.lock", "gpua.lock", "gpu07.lock", "gpu-1.lock", "gpu64.lock",
		"gpu.lock.guard", "gpu0.lock.live-1", "gpu 6.lock", "gpu.x.lock", "gpu7.lock.tmp", "other3.lock", "gpu8.lck"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "gpu4.lock"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "gpu0.lock"), filepath.Join(dir, "gpu3.lock")); err != nil {
		t.Logf("no symbolic link (%v): not checked", err)
	}
	got, err := ExistingDevices(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"0", "1", "2", "10"}; !slices.Equal(got, want) {
		t.Errorf("ExistingDevices = %q, want %q", got, want)
	}
	// What it returns is what Options.Devices takes.
	if _, err := Inspect(Options{Path: path, Devices: got}); err != nil {
		t.Errorf("Inspect with the devices found: %v", err)
	}

	if got, err := ExistingDevices(filepath.Join(dir, "missing", "gpu.lock")); err != nil || got != nil {
		t.Errorf("in a missing folder: %q, %v; want none", got, err)
	}
	many := t.TempDir()
	for i := range maxDevices + 10 {
		if err := os.WriteFile(filepath.Join(many, "gpu"+strconv.Itoa(i)+".lock"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := ExistingDevices(filepath.Join(many, "gpu.lock")); err != nil || len(got) != maxDevices {
		t.Errorf("of %d: %d, %v; want %d", maxDevices+10, len(got), err, maxDevices)
	}
}
