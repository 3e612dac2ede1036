package supervisor

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/lock"
)

func testConfig(t *testing.T, argv ...string) (Config, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})
	return Config{
		Lock: lock.Options{
			Path:   filepath.Join(t.TempDir(), "gpu.lock"),
			Owner:  "test",
			Slug:   "job",
			Poll:   5 * time.Millisecond,
			Logger: logger,
		},
		Wait:      10 * time.Second,
		Argv:      argv,
		KillAfter: time.Second,
		Stdout:    &bytes.Buffer{},
		Stderr:    &bytes.Buffer{},
		Logger:    logger,
	}, &logs
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644)
	tests := []struct {
		name string
		want int
	}{
		{os.Args[0], 0},
		{filepath.Join(dir, "missing"), ExitNotFound},
		{"gpuexec-no-such-command-anywhere", ExitNotFound},
		{noexec, ExitCannotExec},
		{dir, ExitCannotExec},
	}
	for _, tt := range tests {
		_, code, err := resolve(tt.name)
		if code != tt.want {
			t.Errorf("resolve(%q) = %d (%v), want %d", tt.name, code, err, tt.want)
		}
		if (err != nil) != (tt.want != 0) {
			t.Errorf("resolve(%q) error = %v", tt.name, err)
		}
	}
}

func TestNoCommand(t *testing.T) {
	cfg, logs := testConfig(t)
	if code := Run(context.Background(), cfg); code != ExitFailed {
		t.Fatalf("Run without a command = %d, want %d", code, ExitFailed)
	}
	if !strings.Contains(logs.String(), "no command given") {
		t.Fatalf("log: %s", logs)
	}
}

// The child's lock variables replace inherited ones; gpuexec's own flag
// variables (GPUEXEC_LOCK) pass through as the user set them.
func TestChildEnvReplacesLockVariables(t *testing.T) {
	cfg, _ := testConfig(t, "x")
	cfg.Env = []string{"A=1", EnvLockHeld + "=0", EnvLockPath + "=/elsewhere", "GPUEXEC_LOCK=/users/own", EnvLockToken + "=0000000000000000"}
	h, err := lock.TryAcquire(cfg.Lock)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	got := strings.Join(childEnv(cfg, fileLock{h}), "\n")
	want := strings.Join([]string{"A=1", "GPUEXEC_LOCK=/users/own", EnvLockHeld + "=1", EnvLockPath + "=" + h.Path(), EnvLockToken + "=" + h.Info().Token}, "\n")
	if got != want {
		t.Fatalf("child env:\n%s\nwant:\n%s", got, want)
	}
}

func TestWaitZeroWhileHeldIsDeferred(t *testing.T) {
	cfg, logs := testConfig(t, os.Args[0], "-test.run=^$")
	cfg.Wait = 0
	h, err := lock.TryAcquire(cfg.Lock)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if code := Run(context.Background(), cfg); code != ExitDeferred {
		t.Fatalf("Run = %d, want %d", code, ExitDeferred)
	}
	if !strings.Contains(logs.String(), "held by test/job") {
		t.Fatalf("log does not name the holder: %s", logs)
	}
}

func TestLockReleasedAfterRun(t *testing.T) {
	cfg, logs := testConfig(t, os.Args[0], "-test.run=^$")
	if code := Run(context.Background(), cfg); code != 0 {
		t.Fatalf("Run = %d\n%s", code, logs)
	}
	for _, line := range []string{"acquired GPU lock", "job started", "job exited", "releasing GPU lock"} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("log lacks %q:\n%s", line, logs)
		}
	}
	if _, err := os.Stat(cfg.Lock.Path); !os.IsNotExist(err) {
		t.Fatalf("lock left after Run: %v", err)
	}
}

// recordCounter is a holding that counts RecordChild calls.
type recordCounter struct {
	holding
	calls chan int
}

func (r recordCounter) RecordChild(pgid int) error {
	r.calls <- pgid
	return nil
}

func TestRecordChildWaitsForTheJobToRun(t *testing.T) {
	t.Run("a job that ends sooner is not recorded", func(t *testing.T) {
		h := recordCounter{calls: make(chan int, 1)}
		// An hour: stopped long before, however slow the machine.
		recordChild(h, 42, time.Hour, hclog.NewNullLogger()).stop()
		select {
		case id := <-h.calls:
			t.Fatalf("RecordChild(%d) called for a job stopped before RecordChildAfter", id)
		default:
		}
	})
	t.Run("a job that runs on is recorded once", func(t *testing.T) {
		h := recordCounter{calls: make(chan int, 2)}
		r := recordChild(h, 42, RecordChildAfter, hclog.NewNullLogger())
		select {
		case id := <-h.calls:
			if id != 42 {
				t.Fatalf("RecordChild(%d), want 42", id)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("RecordChild not called")
		}
		r.stop()
		if len(h.calls) != 0 {
			t.Fatal("RecordChild called more than once")
		}
	})
}
