//go:build unix

package gpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
)

// Later finds nvidia-smi on PATH when first asked, not when made.
func TestLater(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	src := Later()
	fake(t, gputest.Fixture{Frames: []gputest.Frame{{GPUs: []gputest.GPU{gputest.RTX3080(0, gputest.UUID0, 100)}}}})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Put there after Later was made: it has not looked yet.
	if err := os.Symlink(self, filepath.Join(dir, "nvidia-smi")); err != nil {
		t.Fatal(err)
	}
	devs, err := src.Devices(context.Background())
	if err != nil || len(devs) != 1 || devs[0].UUID != gputest.UUID0 {
		t.Fatalf("Devices = %+v, %v", devs, err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := Later().Processes(context.Background()); !errors.Is(err, ErrNoTool) && !isDriverPath() {
		t.Fatalf("without nvidia-smi: %v", err)
	}
}

// isDriverPath reports whether this machine has nvidia-smi where drivers
// install it (then Later finds it whatever PATH says).
func isDriverPath() bool {
	for _, p := range driverPaths() {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// An nvidia-smi that exits but leaves a process of its own holding its
// output is a driver error that says so, not one quoting its first row.
func TestOutputKeptOpenByAChild(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child")
	script := filepath.Join(dir, "nvidia-smi")
	body := "#!/bin/sh\necho '0, " + gputest.UUID0 + ", 10240, 0, 10000, 240, [N/A], NVIDIA GeForce RTX 3080'\nsleep 30 &\necho $! > " + pidFile + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	_, err := (&SMI{Path: script, Timeout: 10 * time.Second}).Devices(context.Background())
	if !errors.Is(err, ErrDriver) || !strings.Contains(err.Error(), "kept its output open") || strings.Contains(err.Error(), gputest.UUID0) {
		t.Fatalf("error %v, want an ErrDriver saying its output was kept open", err)
	}
}
