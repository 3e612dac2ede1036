package lock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBadPaths(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	folder := filepath.Join(dir, "folder.lock")
	os.Mkdir(folder, 0o755)
	notLock := filepath.Join(dir, "notes.txt")
	os.WriteFile(notLock, []byte("render notes\n"), 0o644)
	old := time.Now().Add(-24 * time.Hour)
	os.Chtimes(notLock, old, old)
	tests := []struct {
		name, path string
	}{
		{"parent is a file", filepath.Join(file, "gpu.lock")},
		{"lock path is a folder", folder},
		{"lock path holds a file that is not a lock", notLock},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{Path: tt.path, Poll: time.Millisecond}
			defer func() {
				if b, err := os.ReadFile(notLock); err != nil || string(b) != "render notes\n" {
					t.Fatalf("a file that is not a lock was changed: %q, %v", b, err)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := Acquire(ctx, o); err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire(%s) = %v, want an immediate error", tt.path, err)
			}
			if _, err := Inspect(Options{Path: tt.path}); err == nil {
				t.Fatalf("Inspect(%s) succeeded", tt.path)
			}
			if _, err := Clear(Options{Path: tt.path}, true); err == nil {
				t.Fatalf("Clear(%s, force) succeeded", tt.path)
			}
		})
	}
}

// A path shaped like a URL or HOST:PORT that is not etcd:// (a mistyped
// etcd URL) is refused by every entry point before anything is made: taken
// as a relative path it would be a lock of this machine alone.
func TestURLShapedPathsAreRefused(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	for _, path := range []string{
		"http://127.0.0.1:2379/gpuexec/x", "https://h:2379/gpuexec/x", "etcd3://h:2379/k", "etcd:/h:2379/k",
		"etcd:h:2379/k", "127.0.0.1:2379/gpuexec/x", "host:2379/gpuexec/x", "//h:2379/gpuexec/x",
	} {
		t.Run(path, func(t *testing.T) {
			o := Options{Path: path}
			calls := map[string]func() error{
				"CheckPath":   func() error { return CheckPath(path) },
				"Files.Check": func() error { return Files.Check(o) },
				"TryAcquire":  func() error { return released(TryAcquire(o)) },
				"Acquire":     func() error { return released(Acquire(context.Background(), o)) },
				"Inspect":     func() error { _, err := Inspect(o); return err },
				"Clear":       func() error { _, err := Clear(o, true); return err },
			}
			for name, call := range calls {
				var oe *OptionError
				if err := call(); !errors.As(err, &oe) || oe.Option != "path" || !strings.Contains(oe.Problem, "etcd://") {
					t.Errorf("%s(%q) = %v, want an *OptionError for path naming etcd://", name, path, err)
				}
			}
			if ents, _ := os.ReadDir(cwd); len(ents) > 0 {
				t.Errorf("made in the working directory: %v", ents)
			}
		})
	}
	for _, path := range []string{"./host:2379/gpu.lock", "locks/host:2379/gpu.lock", "gpu.lock", filepath.Join(cwd, "gpu.lock")} {
		if err := CheckPath(path); err != nil {
			t.Errorf("CheckPath(%q) = %v, want nil", path, err)
		}
	}
}

// released releases h if it was taken, and returns err.
func released(h *Held, err error) error {
	if h != nil {
		h.Release()
	}
	return err
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name string
		o    Options
	}{
		{"empty path", Options{}},
		{"negative poll", Options{Path: "x", Poll: -1}},
		{"heartbeat not under stale", Options{Path: "x", Heartbeat: time.Hour, Stale: time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := TryAcquire(tt.o); !errors.Is(err, ErrInvalid) {
				t.Fatalf("TryAcquire(%+v) = %v, want ErrInvalid", tt.o, err)
			}
		})
	}
	o, _, err := Options{Path: "x", Stale: time.Minute}.withDefaults()
	if err != nil || o.Heartbeat >= o.Stale {
		t.Fatalf("default heartbeat %s not under stale %s (%v)", o.Heartbeat, o.Stale, err)
	}
}
