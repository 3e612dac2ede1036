//go:build unix

package cli

// Hostile and corrupt lock paths: each has one defined outcome, never a
// panic, never two holders.
//
//   - waits: the file is taken for a live lock (a record being written, or a
//     holder whose pid lives); gpuexec queues until --wait elapses (75) and
//     touches nothing.
//   - clears: the file is a stale lock (a record being written for longer
//     than 10 s, a holder that is gone); one of several gpuexec processes
//     clears it, and their jobs run one at a time.
//   - refuses: the path is not a lock gpuexec may judge (not a lock file,
//     not a regular file, not readable, not creatable); gpuexec, status and
//     clear (even --force) exit 125 with one line on stderr and leave it as
//     it was.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

type hostileOutcome int

const (
	waits hostileOutcome = iota
	clears
	refuses
)

func (o hostileOutcome) String() string { return [...]string{"waits", "clears", "refuses"}[o] }

type hostileCase struct {
	name string
	// setup puts the hostile thing at or around lock (whose folder, dir,
	// exists) and returns what must stay untouched (nil: nothing).
	setup   func(t *testing.T, dir, lock string) []string
	outcome hostileOutcome
	// msg is a substring of the one line a refusal prints.
	msg string
	// unprivileged: the case relies on file permissions, which root
	// ignores; as root, gpuexec runs as nobody.
	unprivileged bool
	// statusFree, clearFree: status (clear) finds no lock there and says
	// free (exit 0), instead of refusing.
	statusFree, clearFree bool
	// statusMsg, when set, is what status's and clear's refusal says
	// instead of msg.
	statusMsg string
}

// writeAt writes content at path with an mtime age ago (negative: in the
// future).
func writeAt(t *testing.T, path string, content []byte, age time.Duration) {
	t.Helper()
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	mt := time.Now().Add(-age)
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
}

// content is a setup that writes content at the lock path, age old.
func content(c []byte, age time.Duration) func(t *testing.T, dir, lock string) []string {
	return func(t *testing.T, dir, lock string) []string {
		writeAt(t, lock, c, age)
		return []string{lock}
	}
}

// snapshot describes a path for "left as it was": its type, mode, size,
// mtime and content (a link's target for a symbolic link).
func snapshot(path string) string {
	fi, err := os.Lstat(path)
	if err != nil {
		return "missing: " + err.Error()
	}
	s := fmt.Sprintf("%s %d %s", fi.Mode(), fi.Size(), fi.ModTime().Format(time.RFC3339Nano))
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		s += fmt.Sprintf(" -> %q %v", target, err)
	case fi.Mode().IsRegular() && fi.Mode().Perm()&0o444 != 0:
		b, err := os.ReadFile(path)
		s += fmt.Sprintf(" %x %v", b, err)
	case fi.IsDir():
		ents, err := os.ReadDir(path)
		s += fmt.Sprintf(" %d entries %v", len(ents), err)
	}
	return s
}

var (
	forOthersMu   sync.Mutex
	forOthersDir  string            // a folder every user can reach, in testDir
	forOthersBins map[string]string // name → a copy there
)

// forOtherUsers is a copy of the program at src, named name, that any user
// can run (the test's own build folder is root's alone); one per name.
func forOtherUsers(t *testing.T, src, name string) string {
	t.Helper()
	forOthersMu.Lock()
	defer forOthersMu.Unlock()
	if bin, ok := forOthersBins[name]; ok {
		return bin
	}
	if forOthersDir == "" {
		// In this test process's own folder, removed with it: made in
		// /tmp, the copies (7.6 MB) were left there whenever the removal
		// after the tests did not run.
		dir := filepath.Join(testDir, "users")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		forOthersDir, forOthersBins = dir, map[string]string{}
	}
	bin := filepath.Join(forOthersDir, name)
	if err := copyFile(src, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	forOthersBins[name] = bin
	return bin
}

// The copies other users run are in testDir, removed with it.
func TestCopiesForOtherUsersStayInTestDir(t *testing.T) {
	t.Parallel()
	bin := sharedGpuexec(t)
	if rel, err := filepath.Rel(testDir, bin); err != nil || !filepath.IsLocal(rel) {
		t.Errorf("the copy of gpuexec for other users, %s, is not in %s", bin, testDir)
	}
}

// sharedGpuexec is a copy of gpuexec that any user can run.
func sharedGpuexec(t *testing.T) string { return forOtherUsers(t, gpuexecBin, "gpuexec") }

// asUnprivileged makes cmd run as nobody (65534) when this test runs as
// root, from a copy of gpuexec that nobody can reach; otherwise it is left
// alone.
func asUnprivileged(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	cmd.Path = sharedGpuexec(t)
	cmd.Args[0] = cmd.Path
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
}

func copyFile(from, to string, mode os.FileMode) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	return errors.Join(err, dst.Close())
}

// reachable makes the folders from the temporary folder down to dir
// (t.TempDir()'s, created by the test) traversable by everyone, for the
// cases run as nobody.
func reachable(t *testing.T, dir string) {
	t.Helper()
	tmp := filepath.Clean(os.TempDir())
	for d := dir; strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func hostileCases(t *testing.T) []hostileCase {
	dead := testsupport.DeadPID(t)
	self := os.Getpid()
	const tok = "0123456789abcdef"
	old := 30 * time.Second // past the 10 s a record being written gets
	future := -time.Hour
	mb := append([]byte(`{"pid":1,"token":"`+tok+`","pad":"`), bytes.Repeat([]byte("a"), 1<<20)...)
	mb = append(mb, `"}`...)
	return []hostileCase{
		{name: "empty file", setup: content(nil, 0), outcome: waits},
		{name: "empty file, 30s old", setup: content(nil, old), outcome: clears},
		{name: "whitespace", setup: content([]byte(" \n\t \r\n"), 0), outcome: waits},
		{name: "whitespace, 30s old", setup: content([]byte(" \n\t \r\n"), old), outcome: clears},
		{name: "NUL bytes, 30s old", setup: content(bytes.Repeat([]byte{0}, 120), old), outcome: clears},
		{name: "binary garbage", setup: content([]byte("\x7fELF\x02\x01\x01\x00\xff\xfe\x00"), old), outcome: refuses, msg: "not a lock file"},
		{name: "text", setup: content([]byte("root:x:0:0:root:/root:/bin/bash\n"), old), outcome: refuses, msg: "not a lock file"},
		{name: "truncated JSON", setup: content([]byte(`{"pid":4242,"acquiredAt":"2026-10`), 0), outcome: waits},
		{name: "truncated JSON, 30s old", setup: content([]byte(`{"pid":4242,"acquiredAt":"2026-10`), old), outcome: clears},
		{name: "JSON of the wrong types", setup: content([]byte(`{"pid":"4242","token":42}`), 0), outcome: waits},
		{name: "JSON of the wrong types, 30s old", setup: content([]byte(`{"pid":"4242","token":42}`), old), outcome: clears},
		{name: "JSON without pid or token", setup: content([]byte(`{"name":"my-app","version":"1.0.0"}`), old), outcome: refuses, msg: "not a lock file"},
		{name: "JSON array", setup: content([]byte(`[4242,"`+tok+`"]`), old), outcome: refuses, msg: "not a lock file"},
		{name: "pid 0", setup: content([]byte(`{"pid":0,"token":"`+tok+`"}`), 0), outcome: waits},
		{name: "pid 0, 30s old", setup: content([]byte(`{"pid":0,"token":"`+tok+`"}`), old), outcome: clears},
		{name: "pid -1, 30s old", setup: content([]byte(`{"pid":-1,"token":"`+tok+`"}`), old), outcome: clears},
		{name: "pid above int32, 30s old", setup: content([]byte(`{"pid":2147483648,"token":"`+tok+`"}`), old), outcome: clears},
		{name: "pid 1e30, 30s old", setup: content([]byte(`{"pid":1e30,"token":"`+tok+`"}`), old), outcome: clears},
		{name: "pid of a process that is gone", setup: content(seedRecord(dead, "ghost", "old", tok), 0), outcome: clears},
		{name: "pid of a live process", setup: content(seedRecord(self, "test", "live", tok), 0), outcome: waits},
		{name: "1 MB file", setup: content(mb, old), outcome: refuses, msg: "not a lock file"},
		{name: "1 MB of NUL bytes", setup: content(make([]byte, 1<<20), old), outcome: refuses, msg: "not a lock file"},
		{name: "mtime in the future, pid gone", setup: content(seedRecord(dead, "ghost", "future", tok), future), outcome: clears},
		{name: "mtime in the future, pid alive", setup: content(seedRecord(self, "test", "future", tok), future), outcome: waits},
		{name: "folder at the lock path", outcome: refuses, msg: "not a regular file", setup: func(t *testing.T, dir, lock string) []string {
			if err := os.Mkdir(lock, 0o755); err != nil {
				t.Fatal(err)
			}
			return []string{lock}
		}},
		{name: "symlink to a lock record", outcome: refuses, msg: "not a regular file", setup: func(t *testing.T, dir, lock string) []string {
			target := filepath.Join(t.TempDir(), "record")
			writeAt(t, target, seedRecord(dead, "ghost", "old", tok), old)
			if err := os.Symlink(target, lock); err != nil {
				t.Fatal(err)
			}
			return []string{lock, target}
		}},
		{name: "symlink to a precious file", outcome: refuses, msg: "not a regular file", setup: func(t *testing.T, dir, lock string) []string {
			target := filepath.Join(t.TempDir(), "precious")
			writeAt(t, target, []byte("do not touch\n"), old)
			if err := os.Symlink(target, lock); err != nil {
				t.Fatal(err)
			}
			return []string{lock, target}
		}},
		{name: "dangling symlink", outcome: refuses, msg: "not a regular file", setup: func(t *testing.T, dir, lock string) []string {
			target := filepath.Join(t.TempDir(), "nothing-here")
			if err := os.Symlink(target, lock); err != nil {
				t.Fatal(err)
			}
			return []string{lock, target}
		}},
		{name: "symlink to a folder", outcome: refuses, msg: "not a regular file", setup: func(t *testing.T, dir, lock string) []string {
			target := t.TempDir()
			if err := os.Symlink(target, lock); err != nil {
				t.Fatal(err)
			}
			return []string{lock, target}
		}},
		{name: "FIFO at the lock path", outcome: refuses, msg: "not a regular file", setup: func(t *testing.T, dir, lock string) []string {
			if err := syscall.Mkfifo(lock, 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{lock}
		}},
		{name: "parent is a regular file", outcome: refuses, msg: "not a directory", setup: func(t *testing.T, dir, lock string) []string {
			// The lock is <dir>/gpu.lock; make dir's own entry a file
			// by moving the case one level down: <dir>/file/gpu.lock.
			return nil
		}},
		{name: "unreadable file", unprivileged: true, outcome: refuses, msg: "permission denied", setup: func(t *testing.T, dir, lock string) []string {
			writeAt(t, lock, seedRecord(dead, "ghost", "old", tok), old)
			if err := os.Chmod(lock, 0); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			return []string{lock}
		}},
		{name: "read-only folder", unprivileged: true, statusFree: true, clearFree: true, outcome: refuses, msg: "permission denied", setup: func(t *testing.T, dir, lock string) []string {
			if err := os.Chmod(dir, 0o555); err != nil {
				t.Fatal(err)
			}
			return []string{dir}
		}},
		{name: "parent that cannot be created", unprivileged: true, statusMsg: "does not exist", outcome: refuses, msg: "permission denied", setup: func(t *testing.T, dir, lock string) []string {
			// The lock is moved one level down, under a folder that
			// cannot be created: <dir>/sub/gpu.lock with dir read-only.
			if err := os.Chmod(dir, 0o555); err != nil {
				t.Fatal(err)
			}
			return []string{dir}
		}},
	}
}

// TestHostileLockPaths runs gpuexec, status and clear on each hostile lock
// path and checks its defined outcome.
func TestHostileLockPaths(t *testing.T) {
	t.Parallel()
	for _, tc := range hostileCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "locks")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			lock := filepath.Join(dir, "gpu.lock")
			switch tc.name {
			case "parent is a regular file":
				file := filepath.Join(dir, "file")
				writeAt(t, file, []byte("x"), 0)
				lock = filepath.Join(file, "gpu.lock")
			case "parent that cannot be created":
				lock = filepath.Join(dir, "sub", "gpu.lock")
			}
			untouched := tc.setup(t, dir, lock)
			if tc.name == "parent is a regular file" {
				untouched = []string{filepath.Dir(lock)}
			}
			if tc.unprivileged {
				reachable(t, dir)
				t.Cleanup(func() { os.Chmod(dir, 0o755) })
			}
			before := make([]string, len(untouched))
			for i, p := range untouched {
				before[i] = snapshot(p)
			}
			stillUntouched := func(when string) {
				t.Helper()
				for i, p := range untouched {
					if got := snapshot(p); got != before[i] {
						t.Errorf("%s: %s changed:\n was %s\n now %s", when, p, before[i], got)
					}
				}
			}
			run := func(env []string, args ...string) result {
				t.Helper()
				cmd := gpuexecCmd(env, args...)
				if tc.unprivileged {
					asUnprivileged(t, cmd)
				}
				r := startProc(t, cmd).wait(t)
				if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
					t.Fatalf("%v panicked:\n%s", args, r.stderr)
				}
				return r
			}
			job := []string{"--", "/bin/sh", "-c", "exit 0"}

			switch tc.outcome {
			case refuses:
				for _, extra := range [][]string{{"--wait", "2s"}, {"--wait", "0"}} {
					args := append(append([]string{"--lock", lock}, extra...), job...)
					r := run(nil, args...)
					wantCode(t, r, 125)
					if l := lines(r.stderr); len(l) != 1 || !strings.Contains(r.stderr, tc.msg) {
						t.Errorf("gpuexec %v: stderr is not one line saying %q:\n%s", extra, tc.msg, r.stderr)
					}
				}
				for _, args := range [][]string{{"status"}, {"status", "--json"}, {"clear"}, {"clear", "--force"}} {
					r := run(nil, append(args, "--lock", lock)...)
					if free := (args[0] == "status" && tc.statusFree) || (args[0] == "clear" && tc.clearFree); free {
						wantCode(t, r, 0)
						if !strings.Contains(r.stdout, "free") {
							t.Errorf("%v: %q, want free", args, r.stdout)
						}
						continue
					}
					wantCode(t, r, 125)
					msg := tc.msg
					if tc.statusMsg != "" {
						msg = tc.statusMsg
					}
					if !strings.Contains(r.stderr, msg) {
						t.Errorf("%v: stderr does not say %q:\n%s", args, msg, r.stderr)
					}
				}
				stillUntouched("after gpuexec, status and clear")

			case waits:
				// A record being written is held for 10 s from its
				// mtime: keep it fresh however slow the machine.
				if fi, err := os.Stat(lock); err == nil && time.Since(fi.ModTime()) >= 0 && time.Since(fi.ModTime()) < 5*time.Second {
					refresh := func() {
						now := time.Now()
						os.Chtimes(lock, now, now)
						before[0] = snapshot(lock)
					}
					run = func(run func([]string, ...string) result) func([]string, ...string) result {
						return func(env []string, args ...string) result {
							t.Helper()
							refresh()
							return run(env, args...)
						}
					}(run)
				}
				r := run([]string{role("exit")}, "--lock", lock, "--wait", "300ms", "--", helperBin, "0")
				wantCode(t, r, 75)
				if strings.Contains(r.stderr, "job started") || !strings.Contains(r.stderr, "waiting for GPU lock") {
					t.Errorf("gpuexec did not wait, or ran the job:\n%s", r.stderr)
				}
				r = run(nil, "status", "--json", "--lock", lock)
				wantCode(t, r, 0)
				if !strings.Contains(r.stdout, `"state":"held"`) {
					t.Errorf("status --json: %s, want held", r.stdout)
				}
				wantCode(t, run(nil, "clear", "--lock", lock), 1)
				stillUntouched("after gpuexec, status and clear")

			case clears:
				r := run(nil, "status", "--json", "--lock", lock)
				wantCode(t, r, 0)
				if !strings.Contains(r.stdout, `"state":"stale"`) {
					t.Errorf("status --json: %s, want stale", r.stdout)
				}
				// Several gpuexec processes at once: one clears, and
				// their jobs run one at a time.
				work := t.TempDir()
				truth, overlap, count := filepath.Join(work, "truth"), filepath.Join(work, "overlap"), filepath.Join(work, "count")
				env := []string{role("critical"), truthEnv + "=" + truth, overlapEnv + "=" + overlap, countEnv + "=" + count}
				const n = 4
				var procs []*proc
				for range n {
					procs = append(procs, startProc(t, gpuexecCmd(env, "--lock", lock, "--wait", "20s", "--", helperBin)))
				}
				cleared := 0
				for _, p := range procs {
					r := p.wait(t)
					wantCode(t, r, 0)
					cleared += strings.Count(r.stderr, "cleared stale GPU lock")
				}
				if cleared != 1 {
					t.Errorf("the stale lock was cleared %d times, want once", cleared)
				}
				if b, err := os.ReadFile(overlap); err == nil {
					t.Errorf("jobs overlapped:\n%s", b)
				}
				if b, _ := os.ReadFile(count); len(lines(string(b))) != n {
					t.Errorf("%d jobs ran, want %d", len(lines(string(b))), n)
				}
				wantNoLock(t, lock)
				wantOnlyGuard(t, dir)
			}
		})
	}
}
