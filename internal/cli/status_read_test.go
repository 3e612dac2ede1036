package cli

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// status names the lock it read (a TMPDIR or a --lock other than the jobs'
// shows), and a lock whose folder does not exist, or is not a folder, is
// not free: one line, status 125 (unreadable), with or without --check,
// --json and --gpus, and nothing is created. A folder without a lock in it
// is free.
func TestStatusSaysWhatItRead(t *testing.T) {
	t.Parallel()
	env := []string{"TMPDIR=" + t.TempDir()}
	dir, lock := lockInFolder(t)
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := gx(t, env, "status", "--check", "--lock", lock)
	wantCode(t, r, 0)
	if want := "free\n" + readLineOf(t, lock) + "\n"; r.stdout != want {
		t.Errorf("status of a free lock printed %q, want %q", r.stdout, want)
	}
	if m := testsupport.StatusJSON(t, long, gpuexecBin, lock); m["state"] != "free" || m["path"] != filepath.Join(real, "gpu.lock") {
		t.Errorf("status --json %v: want free, with the lock's path", m)
	}
	r = gx(t, env, "status", "--lock", lock, "--gpus", "0,1")
	wantCode(t, r, 0)
	if want := "GPU 0: free\nGPU 1: free\nlocks: gpu0.lock, gpu1.lock in " + real + "\n"; r.stdout != want {
		t.Errorf("status --gpus 0,1 printed %q, want %q", r.stdout, want)
	}

	top := t.TempDir()
	missing := filepath.Join(top, "no", "such")
	file := filepath.Join(top, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, lock, says string
	}{
		{"a folder that does not exist", filepath.Join(missing, "gpu.lock"), missing + " does not exist"},
		{"a file for a folder", filepath.Join(file, "gpu.lock"), file + ": not a directory"},
	} {
		for _, args := range [][]string{{"status"}, {"status", "--check"}, {"status", "--json"}, {"status", "--check", "--gpus", "0,1"}} {
			args := append(args, "--lock", c.lock)
			r := gx(t, env, args...)
			if r.code != 125 || r.stdout != "" || len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, c.says) ||
				!strings.Contains(r.stderr, "cannot read the lock "+c.lock) {
				t.Errorf("%s: %v: exit %d, stdout %q, stderr %q; want 125 and one line saying %q",
					c.name, args, r.code, r.stdout, r.stderr, c.says)
			}
			if json.Valid([]byte(r.stdout)) && strings.Contains(r.stdout, "free") {
				t.Errorf("%s: %v printed free", c.name, args)
			}
		}
	}
	if _, err := os.Lstat(filepath.Dir(missing)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("status made the missing lock's folder (%v)", err)
	}
}

// lockInFolder is lockIn with its folder made: a lock no job has used yet,
// which status reads as free.
func lockInFolder(t testing.TB) (dir, lock string) {
	t.Helper()
	dir, lock = lockIn(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, lock
}

// readLineOf is status's last line for the lock file lock: "lock: " and
// its path, its folder's links resolved.
func readLineOf(t testing.TB, lock string) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(filepath.Dir(lock))
	if err != nil {
		t.Fatal(err)
	}
	return "lock: " + filepath.Join(dir, filepath.Base(lock))
}
