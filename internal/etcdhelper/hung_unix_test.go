//go:build unix

package etcdhelper

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
	"github.com/gpuexec/gpuexec/lock"
)

// A real helper process that stops answering is killed once it misses its
// bound, and reaped: once Inspect, Clear or TryAcquire returns, no process
// has its pid, not even a zombie (this test process is its parent, so a
// zombie would stay). One that leaves a process holding its output does not
// keep them waiting for the end of that output either.
func TestHungHelperIsKilledAndReaped(t *testing.T) {
	const url = "etcd://127.0.0.1:1/gpuexec/hung?dial-timeout=100ms"
	hello := fmt.Sprintf(`printf '%%s\n' '{"event":"hello","protocol":%d}'`, Protocol)
	ops := []struct {
		name string
		call func(lock.Options) error
	}{
		{"status", func(o lock.Options) error { _, err := Backend{}.Inspect(o); return err }},
		{"clear", func(o lock.Options) error { _, err := Backend{}.Clear(o, false); return err }},
		{"try", func(o lock.Options) error {
			h, err := Backend{}.TryAcquire(o)
			if err == nil {
				h.Release()
			}
			return err
		}},
	}
	for _, c := range []struct {
		name, script string
		ops          int // how many of ops, the first ones, to try
	}{
		{"never says hello", `echo $$ > "$PIDS"; exec sleep 3600`, 1},
		{"hangs on the request", `read -r h; read -r r; ` + hello + `; echo $$ > "$PIDS"; exec sleep 3600`, len(ops)},
		{"leaves a process holding its output", `sleep 3600 & ` + hello + `; echo $$ $! > "$PIDS"; exec sleep 3600`, 1},
	} {
		for _, op := range ops[:c.ops] {
			t.Run(c.name+"/"+op.name, func(t *testing.T) {
				dir := t.TempDir()
				helper, pids := filepath.Join(dir, "helper"), filepath.Join(dir, "pids")
				if err := os.WriteFile(helper, []byte("#!/bin/sh\ntrap '' HUP INT TERM\n"+c.script+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				t.Setenv(Env, helper)
				t.Setenv("PIDS", pids)
				t.Cleanup(func() {
					b, _ := os.ReadFile(pids)
					for _, f := range strings.Fields(string(b)) {
						if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
							syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				})
				done := make(chan error, 1)
				go func() { done <- op.call(lock.Options{Path: url}) }()
				var err error
				select {
				case err = <-done:
				case <-time.After(30 * time.Second):
					t.Fatal("still waiting for the hung helper after 30s")
				}
				if err == nil || !strings.Contains(err.Error(), helper) || !strings.Contains(err.Error(), "within") {
					t.Errorf("error %v, want one naming the helper %s and the bound it missed", err, helper)
				}
				for i, pid := range testsupport.AwaitPIDs(t, 5*time.Second, pids) {
					// The helper is this process's child: not even a
					// zombie may be left. What it left behind is init's
					// to reap: it must be dead.
					if err := syscall.Kill(pid, 0); i == 0 && !errors.Is(err, syscall.ESRCH) {
						t.Errorf("the hung helper %d is still there (running or a zombie): kill 0: %v", pid, err)
					} else if i > 0 {
						// Killed before the call returned; its death
						// (and init's reaping) may take a moment more
						// on a loaded machine.
						testsupport.Await(t, 5*time.Second, fmt.Sprintf("process %d left by the hung helper to end", pid),
							func() bool { return testsupport.Gone(pid) })
					}
				}
			})
		}
	}
}
