//go:build unix

package cli

// Black-box tests of the --log file against other local users and a full
// disk: nobody else can take the log's lock and freeze a job, a rotation
// that cannot happen never spins, the log's folder must be the caller's or
// root's, a log swapped for another file is never appended to, and a full
// disk never leaves half a line. Each failed before the fix it guards.

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// outsiderUID is a local user in no group of the caller's.
const outsiderUID = 4343

// needRoot skips t unless it runs as root, which other users and mounts
// need.
func needRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root " + why + " (CI runs as root)")
	}
}

// logDirIn makes a folder for the --log file, root's and 0755, that every
// user can reach.
func logDirIn(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	reachable(t, base)
	dir := filepath.Join(base, "logs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// asOutsider makes cmd run as outsiderUID, in a process group of its own
// that is killed when the test ends.
func asOutsider(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	cmd.Env = testsupport.Env("TMPDIR=" + t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: outsiderUID, Gid: outsiderUID}}
	p := startProc(t, cmd)
	t.Cleanup(func() { syscall.Kill(-p.pid(), syscall.SIGKILL) })
	return p
}

// lockHeld reports whether someone holds the flock on path.
func lockHeld(t *testing.T, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// countLines is how many lines of s hold every one of parts.
func countLines(s string, parts ...string) int {
	n := 0
next:
	for _, l := range lines(s) {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		n++
	}
	return n
}

// Nobody but the caller may open the log's sidecar, so no other user can
// take its lock; and a sidecar whose lock another process holds anyway (one
// left 0644 by an older gpuexec and opened before it was tightened) costs
// the job a bounded wait and one warning: the job runs, its lines go to
// stderr, and gpuexec ends.
func TestLogLockOfAnotherUser(t *testing.T) {
	needRoot(t, "to run flock as another user")
	t.Parallel()

	t.Run("nobody else can open the sidecar", func(t *testing.T) {
		t.Parallel()
		_, lock := lockIn(t)
		logFile := filepath.Join(logDirIn(t), "gpuexec.log")
		wantCode(t, gx(t, []string{role("exit")}, "--lock", lock, "--log", logFile, "--", helperBin, "0"), 0)
		sidecar := logFile + ".lock"
		fi, err := os.Stat(sidecar)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("sidecar is %v: others may open it", fi.Mode())
		}
		r := asOutsider(t, exec.Command("flock", "-n", "-x", sidecar, "true")).wait(t)
		if r.code == 0 || !strings.Contains(r.stderr, "Permission denied") {
			t.Errorf("another user took the sidecar's lock: exit %d\n%s", r.code, r.stderr)
		}
	})

	t.Run("held by another user", func(t *testing.T) {
		t.Parallel()
		_, lock := lockIn(t)
		logFile := filepath.Join(logDirIn(t), "gpuexec.log")
		sidecar := logFile + ".lock"
		// As an older gpuexec left it.
		if err := os.WriteFile(sidecar, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(sidecar, 0o644); err != nil {
			t.Fatal(err)
		}
		out := asOutsider(t, exec.Command("flock", "-x", sidecar, "sleep", "60"))
		testsupport.Await(t, long, "the other user to hold the sidecar's lock", func() bool {
			if out.exited() {
				t.Fatalf("flock as another user exited: %s", out.stderr())
			}
			return lockHeld(t, sidecar)
		})
		r := gx(t, []string{role("exit")}, "--lock", lock, "--log", logFile, "--", helperBin, "0")
		wantCode(t, r, 0)
		if n := countLines(r.stderr, sidecar, "skipped"); n != 1 {
			t.Errorf("%d warnings that the log is skipped, want 1:\n%s", n, r.stderr)
		}
		for _, msg := range []string{"acquired GPU lock", "job started", "job exited", "releasing GPU lock"} {
			if !strings.Contains(r.stderr, msg) {
				t.Errorf("no %q line on stderr:\n%s", msg, r.stderr)
			}
		}
		if fi, err := os.Stat(sidecar); err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("sidecar %v, %v: want it tightened to the caller alone", fi.Mode(), err)
		}
	})
}

// A log name so long that its rotated name is too long for the file
// system (ENAMETOOLONG): the rotation is said once and given up, the lines
// go on into the full file, and gpuexec ends; it never spins looking for a
// free rotated name.
func TestLogRotationNameTooLong(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	logFile := filepath.Join(t.TempDir(), strings.Repeat("n", 236)+".log")
	filler := bytes.Repeat([]byte(`{"@message":"filler"}`+"\n"), (1<<20)/22+1)
	if err := os.WriteFile(logFile, filler, 0o644); err != nil {
		t.Fatal(err)
	}
	r := gx(t, []string{role("exit")}, "--lock", lock, "--log", logFile, "--log-max-size", "1", "--log-format", "json", "--", helperBin, "0")
	wantCode(t, r, 0)
	if n := countLines(r.stderr, "cannot rotate"); n != 1 {
		t.Errorf("%d lines say the log cannot be rotated, want 1:\n%s", n, r.stderr)
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, filler) || byMessage(jsonLines(t, string(b[len(filler):])), "job exited") == nil {
		t.Errorf("the job's lines are not in the full log after the filler")
	}
}

// The --log file's own folder must be the caller's or root's, and writable
// by nobody else: its owner could put a link or another file in the log's
// place. Refused in one line, before the job queues.
func TestLogFolderOfAnotherUser(t *testing.T) {
	needRoot(t, "to give a folder to another user")
	t.Parallel()
	for _, tc := range []struct {
		name  string
		owner int
		perm  os.FileMode
		want  string
	}{
		{"another user's", userA, 0o755, "uid 4242"},
		{"another user's, closed", userA, 0o700, "uid 4242"},
		{"root's, writable by its group", 0, 0o775, "may be written by others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			logDir := logDirIn(t)
			if err := os.Chown(logDir, tc.owner, tc.owner); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(logDir, tc.perm); err != nil {
				t.Fatal(err)
			}
			r := gx(t, []string{role("exit")}, "--lock", lock, "--log", filepath.Join(logDir, "gpuexec.log"), "--", helperBin, "0")
			wantCode(t, r, 125)
			if len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, logDir) || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("want one line naming %s and %q:\n%s", logDir, tc.want, r.stderr)
			}
			if _, err := os.Lstat(dir); err == nil {
				t.Errorf("the job queued: %s was made", dir)
			}
		})
	}
}

// The log swapped mid-run for another file — a hard link to a file of
// root's, or another file renamed over it — is never appended to: gpuexec
// stops writing the log, says so once, and the job ends as it would.
func TestLogSwappedMidRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		swap func(log, victim string) error
	}{
		{"hard link to a root-owned file", func(log, victim string) error {
			if err := os.Remove(log); err != nil {
				return err
			}
			return os.Link(victim, log)
		}},
		{"another file renamed over it", func(log, victim string) error { return os.Rename(victim, log) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, lock := lockIn(t)
			dir := t.TempDir()
			logFile := filepath.Join(dir, "gpuexec.log")
			victim := filepath.Join(dir, "precious")
			if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			h := startHolder(t, lock, "--log", logFile)
			if err := tc.swap(logFile, victim); err != nil {
				t.Fatal(err)
			}
			h.release()
			r := h.p.wait(t)
			wantCode(t, r, 0)
			if b, err := os.ReadFile(logFile); err != nil || string(b) != "precious\n" {
				t.Errorf("the file swapped in was written: %q, %v", b, err)
			}
			if n := countLines(r.stderr, logFile, "not the log"); n != 1 {
				t.Errorf("%d warnings that the log was replaced, want 1:\n%s", n, r.stderr)
			}
			if !strings.Contains(r.stderr, "releasing GPU lock") {
				t.Errorf("the lines stopped on stderr too:\n%s", r.stderr)
			}
		})
	}
}

// On a full disk (a real 64 KiB tmpfs) a line is written whole or not at
// all: the one cut short is taken back, the loss is said once on stderr,
// and once there is room again the next lines follow on lines of their
// own.
func TestLogDiskFull(t *testing.T) {
	needRoot(t, "to mount a small tmpfs")
	t.Parallel()
	disk := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(disk, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", disk).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", disk).CombinedOutput(); err != nil {
			t.Errorf("umount: %v\n%s", err, out)
		}
	})
	// The log ends 100 bytes short of its first page's end, and the rest
	// of the disk is taken: the next line begins in that page and is cut
	// short at its end.
	logFile := filepath.Join(disk, "gpuexec.log")
	pad := `{"@message":"filler","pad":"` + strings.Repeat("x", 4096-100-31) + `"}` + "\n"
	if err := os.WriteFile(logFile, []byte(pad), 0o644); err != nil {
		t.Fatal(err)
	}
	fill := filepath.Join(disk, "fill")
	f, err := os.Create(fill)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	f.Close()

	_, lock := lockIn(t)
	r := gx(t, []string{role("exit")}, "--lock", lock, "--log", logFile, "--log-format", "json", "--", helperBin, "0")
	wantCode(t, r, 0)
	var said int
	for _, m := range jsonLines(t, r.stderr) {
		if s, _ := m["@message"].(string); strings.Contains(s, "lines dropped") {
			said++
		}
	}
	if said != 1 {
		t.Errorf("%d lines say log lines were dropped, want 1:\n%s", said, r.stderr)
	}

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	r = gx(t, []string{role("exit")}, "--lock", lock, "--log", logFile, "--log-format", "json", "--", helperBin, "0")
	wantCode(t, r, 0)
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if !strings.HasSuffix(l, "\n") || json.Unmarshal([]byte(l), &m) != nil {
			t.Errorf("a line cut short or glued to another: %q", l)
		}
	}
	if !strings.Contains(string(b), `"job exited"`) {
		t.Errorf("the second job's lines are not in the log:\n%s", b)
	}
}

// The job started line's command is the job's arguments as a shell reads
// them back: a plain word bare, anything else single-quoted (a ' in it
// as \' between two quotings), so that an argument's spaces, quotes and emptiness are not lost and the
// line can be pasted into a shell.
func TestLogCommandQuotedAsAShellReadsIt(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	r := gx(t, []string{role("exit")}, "--lock", lock, "--log-format", "json", "--", helperBin, "0", "I am on the GPU", "it's", "", "--lr=0.1")
	wantCode(t, r, 0)
	m := byMessage(jsonLines(t, r.stderr), "job started")
	if m == nil {
		t.Fatalf("no job started line:\n%s", r.stderr)
	}
	want := helperBin + ` 0 'I am on the GPU' 'it'\''s' '' --lr=0.1`
	if m["command"] != want {
		t.Errorf("command field\n got %v\nwant %s", m["command"], want)
	}
}
