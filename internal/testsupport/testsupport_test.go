package testsupport

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the failure and ends the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	failure string
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder on a goroutine of its own and returns what
// it failed with ("" if nothing).
func run(t *testing.T, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.failure
}

func TestPollAndAwait(t *testing.T) {
	var n atomic.Int32
	if !Poll(10*time.Second, func() bool { return n.Add(1) == 3 }) {
		t.Fatal("Poll gave up on a condition that came true")
	}
	start := time.Now()
	if Poll(30*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll returned true for a condition that never held")
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("Poll gave up after %s, before its timeout", d)
	}
	if f := run(t, func(tb testing.TB) { Await(tb, 20*time.Millisecond, "nothing", func() bool { return false }) }); f != "timed out after 20ms waiting for nothing" {
		t.Fatalf("Await failed with %q", f)
	}
	if f := run(t, func(tb testing.TB) { Await(tb, time.Second, "now", func() bool { return true }) }); f != "" {
		t.Fatalf("Await failed with %q", f)
	}
}

func TestStillBlocked(t *testing.T) {
	start := time.Now()
	if f := run(t, func(tb testing.TB) { StillBlocked(tb, 30*time.Millisecond, "it", func() bool { return false }) }); f != "" {
		t.Fatalf("StillBlocked failed with %q", f)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("StillBlocked returned after %s, before its time", d)
	}
	// Something that happens late in the window, or just as it ends, is
	// still seen.
	at := time.Now().Add(30 * time.Millisecond)
	if f := run(t, func(tb testing.TB) {
		StillBlocked(tb, 30*time.Millisecond, "it happened", func() bool { return !time.Now().Before(at) })
	}); f == "" {
		t.Fatal("StillBlocked missed what happened at the end of its window")
	}
}

func TestDeadPIDIsGone(t *testing.T) {
	pid := DeadPID(t)
	if pid <= 0 || pid == os.Getpid() || !Gone(pid) {
		t.Fatalf("DeadPID = %d, which is not gone", pid)
	}
	if Gone(os.Getpid()) {
		t.Fatal("this process is gone")
	}
}

func TestAwaitPIDsTakesWholeLinesOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pids")
	if err := os.WriteFile(path, []byte("12 3"), 0o644); err != nil {
		t.Fatal(err)
	}
	if f := run(t, func(tb testing.TB) { AwaitPIDs(tb, 30*time.Millisecond, path) }); f == "" {
		t.Fatal("AwaitPIDs took a line without its newline")
	}
	if err := WriteAtomic(path, []byte("12 34\n")); err != nil {
		t.Fatal(err)
	}
	if got := AwaitPIDs(t, time.Second, path); !slices.Equal(got, []int{12, 34}) {
		t.Fatalf("AwaitPIDs = %v, want [12 34]", got)
	}
}

func TestEnvDropsGpuexecVariables(t *testing.T) {
	t.Setenv("GPUEXEC_LOCK", "/elsewhere")
	env := Env("A=1")
	if slices.Contains(env, "GPUEXEC_LOCK=/elsewhere") || env[len(env)-1] != "A=1" {
		t.Fatalf("Env = %v", env)
	}
}
