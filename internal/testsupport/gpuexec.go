package testsupport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// StatusJSON runs the gpuexec binary bin as "bin status --json --lock lock"
// in Env, and returns the JSON object it prints. It fails t unless bin exits
// 0 within timeout (it is then killed) and prints one JSON object.
func StatusJSON(t testing.TB, timeout time.Duration, bin, lock string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "status", "--json", "--lock", lock)
	cmd.Env = Env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%v did not exit within %s; killed it\nstderr:\n%s", cmd.Args, timeout, &stderr)
	case err != nil:
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", cmd.Args, err, &stdout, &stderr)
	}
	var m map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &m); err != nil {
		t.Fatalf("status --json printed %q: %v\nstderr:\n%s", &stdout, err, &stderr)
	}
	return m
}

// AwaitChildPGID waits at most timeout for the lock record at lock to name
// pgid as its job's process group (childPgid, one of gpuexec's additions to
// the seed's record), and fails t if it does not. Until then a gpuexec
// killed outright leaves a record that does not cover its job's group.
func AwaitChildPGID(t testing.TB, timeout time.Duration, lock string, pgid int) {
	t.Helper()
	Await(t, timeout, fmt.Sprintf("the lock record to name the job's process group %d", pgid), func() bool {
		b, err := os.ReadFile(lock)
		var rec struct {
			ChildPGID int `json:"childPgid"`
		}
		return err == nil && json.Unmarshal(b, &rec) == nil && rec.ChildPGID == pgid
	})
}

// AwaitSharerPGID waits until a sharer's sidecar beside lock names the
// job's process group pgid: gpuexec notes it there just after the job
// starts, and a gpuexec SIGKILLed before that leaves a job it cannot vouch
// for (a window the guarantees leave out).
func AwaitSharerPGID(t testing.TB, timeout time.Duration, lock string, pgid int) {
	t.Helper()
	Await(t, timeout, fmt.Sprintf("a sharer's sidecar to name the job's process group %d", pgid), func() bool {
		paths, _ := filepath.Glob(lock + ".share-*")
		for _, p := range paths {
			b, err := os.ReadFile(p)
			var sc struct {
				ChildPGID int `json:"childPgid"`
			}
			if err == nil && json.Unmarshal(b, &sc) == nil && sc.ChildPGID == pgid {
				return true
			}
		}
		return false
	})
}
