package supervisor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/lock"
	"github.com/gpuexec/gpuexec/lock/etcdlock"
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

func TestFindCommand(t *testing.T) {
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
		_, code, err := findCommand(tt.name)
		if code != tt.want {
			t.Errorf("findCommand(%q) = %d (%v), want %d", tt.name, code, err, tt.want)
		}
		if (err != nil) != (tt.want != 0) {
			t.Errorf("findCommand(%q) error = %v", tt.name, err)
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
	got := strings.Join(childEnv(cfg, heldFiles{h}), "\n")
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

// recordCounter is a jobLock that counts RecordChild calls.
type recordCounter struct {
	jobLock
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
		recordChildLater(h, 42, time.Hour, hclog.NewNullLogger()).stop()
		select {
		case id := <-h.calls:
			t.Fatalf("RecordChild(%d) called for a job stopped before recordChildAfter", id)
		default:
		}
	})
	t.Run("a job that runs on is recorded once", func(t *testing.T) {
		h := recordCounter{calls: make(chan int, 2)}
		r := recordChildLater(h, 42, recordChildAfter, hclog.NewNullLogger())
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

// With an etcd lock KillAfter is under a third of the lease's ttl, so
// that a job whose lock is lost is gone before the next holder may start;
// Forever (no SIGKILL) is refused there. --on-lost continue gives the
// guarantee up, and lock files have no such rule.
func TestValidateKillAfterWithEtcd(t *testing.T) {
	const url = "etcd://127.0.0.1:2379/gpuexec/k"
	for _, tt := range []struct {
		path      string
		killAfter time.Duration
		continues bool
		err       string // "" when valid
	}{
		{url, DefaultKillAfter, false, ""},
		{url, 19999 * time.Millisecond, false, ""},
		{url, 20 * time.Second, false, "must be under 20s with this etcd lock (a third of its ttl=60s)"},
		{url + "?ttl=30s", 10 * time.Second, false, "must be under 10s with this etcd lock (a third of its ttl=30s)"},
		{url + "?ttl=30s", 9 * time.Second, false, ""},
		{url + "?ttl=2s", time.Second, false, "must be under 666.666666ms"},
		{url, 0, false, ""},
		{url, Forever, false, "never cannot be used with an etcd lock"},
		{url, Forever, true, ""},
		{url, time.Hour, true, ""},
		{filepath.Join(t.TempDir(), "gpu.lock"), Forever, false, ""},
		{filepath.Join(t.TempDir(), "gpu.lock"), time.Hour, false, ""},
	} {
		cfg := Config{Lock: lock.Options{Path: tt.path}, Backend: backendOf(tt.path), Argv: []string{"true"}, KillAfter: tt.killAfter, ContinueOnLost: tt.continues}
		err := cfg.Validate()
		var oe *lock.OptionError
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s, kill-after %v, continue %v: %v", tt.path, tt.killAfter, tt.continues, err)
		case tt.err != "" && (!errors.As(err, &oe) || oe.Option != "kill-after" || !strings.Contains(oe.Problem, tt.err)):
			t.Errorf("%s, kill-after %v: %v, want a kill-after error with %q", tt.path, tt.killAfter, err, tt.err)
		}
	}
}

// A Config with an etcd:// lock and no Backend (lock files) is refused, as
// Validate and as Run, and runs nothing: before Backend was the caller's
// choice such a Config took the etcd lock, and lock files would now take
// the URL for folders of this machine (./etcd:/127.0.0.1:2379/...), a lock
// no other machine sees.
func TestEtcdPathWithoutItsBackendIsRefused(t *testing.T) {
	t.Chdir(t.TempDir())
	cfg := Config{Lock: lock.Options{Path: "etcd://127.0.0.1:2379/gpuexec/k"}, Argv: []string{os.Args[0], "-test.run=^$"}}
	var oe *lock.OptionError
	if err := cfg.Validate(); !errors.As(err, &oe) || oe.Option != "path" {
		t.Errorf("Validate: %v, want an *OptionError for path", err)
	}
	if code := Run(context.Background(), cfg); code != ExitFailed {
		t.Errorf("Run: %d, want %d (the job ran under a lock of this machine)", code, ExitFailed)
	}
	if ents, _ := os.ReadDir("."); len(ents) > 0 {
		t.Errorf("Run made %s in the working folder", ents[0].Name())
	}
}

// The default grace keeps the etcd rule whatever the ttl: 10s, or a
// quarter of a ttl under 40s; lock files and unreadable URLs get 10s.
func TestKillAfterFor(t *testing.T) {
	const url = "etcd://127.0.0.1:2379/gpuexec/k"
	for _, tt := range []struct {
		path string
		want time.Duration
	}{
		{"/tmp/x/gpu.lock", DefaultKillAfter},
		{url, DefaultKillAfter},
		{url + "?ttl=40s", DefaultKillAfter},
		{url + "?ttl=30s", 7500 * time.Millisecond},
		{url + "?ttl=2s", 500 * time.Millisecond},
		{"etcd://", DefaultKillAfter},
	} {
		got := KillAfterFor(backendOf(tt.path), lock.Options{Path: tt.path})
		if got != tt.want {
			t.Errorf("KillAfterFor(%q) = %s, want %s", tt.path, got, tt.want)
		}
		cfg := Config{Lock: lock.Options{Path: tt.path}, Backend: backendOf(tt.path), KillAfter: got}
		if err := cfg.leaseGrace(); err != nil {
			t.Errorf("KillAfterFor(%q) = %s breaks the rule: %v", tt.path, got, err)
		}
	}
}

// backendOf is the backend gpuexec takes for path: package etcdlock's
// (lock.Leased) for an etcd:// URL, else nil (lock files).
func backendOf(path string) lock.Backend {
	if strings.HasPrefix(path, "etcd://") {
		return etcdlock.Backend{}
	}
	return nil
}
