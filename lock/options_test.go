package lock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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

// A path is a file's, whatever it looks like: what --lock means (a URL
// is another backend's, a mistyped one refused) is the gpuexec command's
// to say. Only an empty path names no lock file.
func TestCheckPath(t *testing.T) {
	var oe *OptionError
	if err := CheckPath(""); !errors.As(err, &oe) || oe.Option != "path" || oe.Problem != "must not be empty" {
		t.Errorf("CheckPath(\"\") = %v, want an *OptionError for path", err)
	}
	for _, path := range []string{"./host:2379/gpu.lock", "locks/host:2379/gpu.lock", "gpu.lock", filepath.Join(t.TempDir(), "gpu.lock")} {
		if err := CheckPath(path); err != nil {
			t.Errorf("CheckPath(%q) = %v, want nil", path, err)
		}
	}
}

// A path that starts SCHEME:// (etcd://h:2379/k, http://h/k) names another
// backend's lock: the file functions refuse it, touching nothing, instead
// of taking it for folders of this machine (./etcd:/h:2379/k, the // made
// one /), a lock no other machine sees where one shared by several was
// meant. A Windows drive (C://gpu.lock) is a path.
func TestFilesRefuseAURLShapedPath(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, path := range []string{"etcd://127.0.0.1:2379/gpuexec/gpu", "ETCD://h:2379/k", "http://h:2379/k", "etcd3://h/k", "git+ssh://h/k"} {
		refused := func(what string, err error) {
			t.Helper()
			var oe *OptionError
			if !errors.As(err, &oe) || oe.Option != "path" {
				t.Errorf("%s(%q) = %v, want an *OptionError for path", what, path, err)
			}
		}
		refused("Files.Check", Files.Check(Options{Path: path}))
		h, err := TryAcquire(Options{Path: path})
		refused("TryAcquire", released(h, err))
		_, err = Inspect(Options{Path: path})
		refused("Inspect", err)
		_, err = Clear(Options{Path: path}, true)
		refused("Clear", err)
		_, err = Files.Inspect(Options{Path: path, Devices: []string{"0"}})
		refused("Inspect with devices", err)
	}
	if ents, _ := os.ReadDir("."); len(ents) > 0 {
		t.Errorf("a URL-shaped path made %s in the working folder", ents[0].Name())
	}
	for _, path := range []string{"C://gpu.lock", "c:/gpu.lock", "./etcd://h/k", "locks/a://b"} {
		if err := Files.Check(Options{Path: path}); err != nil {
			t.Errorf("Files.Check(%q) = %v, want nil", path, err)
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
