//go:build linux

package proc_test

import (
	"os"
	"testing"

	"github.com/shirou/gopsutil/v3/process"

	"github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// Start agrees with gopsutil's reading of the same process, which
// darwin and Windows builds use.
func TestProcessStartMatchesGopsutil(t *testing.T) {
	ms, ok := proc.Start(os.Getpid())
	if !ok {
		t.Fatal("cannot read our own start time")
	}
	want, err := (&process.Process{Pid: int32(os.Getpid())}).CreateTime()
	if err != nil {
		t.Fatal(err)
	}
	if d := ms - want; d < -1000 || d > 1000 {
		t.Fatalf("start time %d, gopsutil says %d", ms, want)
	}
	if _, ok := proc.Start(testsupport.DeadPID(t)); ok {
		t.Fatal("start time of a dead process")
	}
}
