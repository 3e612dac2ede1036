//go:build unix

package supervisor

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// Config.Ended is told once how each job that queued ended, with times in
// order, after the lock is released.
func TestEndedOncePerJob(t *testing.T) {
	tests := []struct {
		name    string
		argv    []string
		setup   func(t *testing.T, cfg *Config)
		want    Outcome
		status  int
		signal  string
		started bool
	}{
		{"ok", []string{"true"}, nil, OK, 0, "", true},
		{"failed", []string{"sh", "-c", "exit 3"}, nil, Failed, 3, "", true},
		{"timeout", []string{"sleep", "30"}, func(_ *testing.T, cfg *Config) { cfg.Timeout = 100 * time.Millisecond }, Timeout, ExitTimeout, "", true},
		{"deferred", []string{"true"}, func(t *testing.T, cfg *Config) {
			other, _ := testConfig(t, "true")
			other.Lock.Path = cfg.Lock.Path
			held, code, _ := acquire(context.Background(), other)
			if held == nil {
				t.Fatalf("acquire = %d", code)
			}
			t.Cleanup(func() { held.Release() })
			cfg.Wait = 0
		}, Deferred, ExitDeferred, "", false},
		{"interrupted while waiting", []string{"true"}, func(t *testing.T, cfg *Config) {
			other, _ := testConfig(t, "true")
			other.Lock.Path = cfg.Lock.Path
			held, code, _ := acquire(context.Background(), other)
			if held == nil {
				t.Fatalf("acquire = %d", code)
			}
			t.Cleanup(func() { held.Release() })
			sigs := make(chan os.Signal, 1)
			sigs <- syscall.SIGINT
			cfg.Signals = sigs
		}, Interrupted, 130, "SIGINT", false},
		{"interrupted while running", []string{"sleep", "30"}, func(_ *testing.T, cfg *Config) {
			sigs := make(chan os.Signal, 1)
			cfg.Signals = sigs
			go func() { time.Sleep(300 * time.Millisecond); sigs <- syscall.SIGTERM }()
		}, Interrupted, 143, "SIGTERM", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, logs := testConfig(t, tt.argv...)
			if tt.setup != nil {
				tt.setup(t, &cfg)
			}
			var ends []End
			cfg.Ended = func(e End) { ends = append(ends, e) }
			code := Run(context.Background(), cfg)
			if len(ends) != 1 {
				t.Fatalf("Ended called %d times\n%s", len(ends), logs)
			}
			e := ends[0]
			if e.Outcome != tt.want || e.Status != tt.status || e.Status != code || e.Signal != tt.signal {
				t.Errorf("End %+v (Run = %d), want %s status %d signal %q\n%s", e, code, tt.want, tt.status, tt.signal, logs)
			}
			if e.Queued.IsZero() || e.Ended.Before(e.Queued) || (!e.Started.IsZero()) != tt.started ||
				tt.started && (e.Started.Before(e.Queued) || e.Ended.Before(e.Started)) {
				t.Errorf("times out of order: %+v", e)
			}
		})
	}
}

// A nested run under its parent's lock never queued: Ended is not called.
func TestEndedNotForANestedRun(t *testing.T) {
	cfg, _ := testConfig(t, "true")
	cfg.Env = append(os.Environ(), EnvLockHeld+"=1", EnvLockPath+"="+cfg.Lock.Path)
	called := false
	cfg.Ended = func(End) { called = true }
	Run(context.Background(), cfg)
	if _, _, reentrant := nested(cfg); reentrant && called {
		t.Error("Ended called for a nested run")
	}
}
