//go:build unix

package cli

// The promise at its edges: another local user who can write the lock's
// folder, stopped processes, a clock that jumps, jobs whose processes leave
// their group, a terminal, a closed pipe, nested gpuexec, forced clears.
// Each test here failed before the fix it guards.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// Two local users who share the group gpu, by number: no passwd entries are
// needed for the kernel to tell them apart. Tests that need them run as
// root (CI does) and skip otherwise.
const (
	userA, userB = 4242, 4243
	groupGPU     = 4240
)

// asUser makes cmd (a gpuexec command) run as uid in group gpu, from a
// copy of gpuexec every user can run. It skips the test unless this
// process may switch users (root).
func asUser(t *testing.T, cmd *exec.Cmd, uid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run gpuexec as two other users (CI runs as root)")
	}
	if filepath.Base(cmd.Path) == filepath.Base(gpuexecBin) {
		cmd.Path = sharedGpuexec(t)
		cmd.Args[0] = cmd.Path
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
		Uid: uint32(uid), Gid: groupGPU, Groups: []uint32{groupGPU},
	}}
}

// shAs runs script with sh as uid (in group gpu), with umask mask, to its
// end, failing the test if it fails.
func shAs(t *testing.T, uid int, mask string, script string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "umask "+mask+"; "+script)
	asUser(t, cmd, uid)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as uid %d: %s: %v\n%s", uid, script, err, out)
	}
}

// gxAs is gpuexec started as uid (in group gpu) with umask mask: through
// sh, which sets the umask and then becomes gpuexec.
func gxAs(t *testing.T, uid int, mask string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run gpuexec as two other users (CI runs as root)")
	}
	bin := sharedGpuexec(t)
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	cmd := exec.Command("/bin/sh", "-c", "umask "+mask+"; exec "+bin+" "+strings.Join(quoted, " "))
	cmd.Env = testsupport.Env(env...)
	asUser(t, cmd, uid)
	return cmd
}

// sharedDir is a folder that every user can reach, under the test's own
// temporary folder, with mode perm and group gpu.
func sharedDir(t *testing.T, perm os.FileMode) string {
	t.Helper()
	base := t.TempDir()
	reachable(t, base)
	dir := filepath.Join(base, "shared")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 0, groupGPU); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, perm); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A record written by another user whose token names a path outside the
// folder: the token is no name, the record is content that does not parse,
// and clearing it as stale removes the lock file alone, never the file the
// token points at.
func TestTokenNeverBecomesAPath(t *testing.T) {
	t.Parallel()
	dir := sharedDir(t, os.ModeSticky|0o777)
	secret := filepath.Join(filepath.Dir(dir), "secret")
	victim := filepath.Join(secret, "victim")
	if err := os.Mkdir(secret, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(dir, "gpu.lock")
	// gpu.lock.live-/../../secret/victim is <dir>/../secret/victim.
	shAs(t, userA, "022", fmt.Sprintf(`mkdir %s.live- && printf '%%s' '{"pid":999999,"acquiredAt":"2026-10-12T12:18:03.512Z","owner":"mallory","slug":"x","token":"/../../secret/victim"}' > %s && touch -d '-1 hour' %s`,
		lock, lock, lock))

	r := gx(t, nil, "--lock", lock, "--wait", "10s", "--", "true")
	wantCode(t, r, 0)
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Fatalf("the file the token named was touched: %q, %v\n%s", b, err, r.stderr)
	}
	if fi, err := os.Stat(lock + ".live-"); err != nil || !fi.IsDir() {
		t.Errorf("the other user's folder beside the lock is gone: %v", err)
	}
	if !strings.Contains(r.stderr, "cleared stale GPU lock") {
		t.Errorf("the unparseable record was not cleared as stale:\n%s", r.stderr)
	}
}

// FIFOs and links to them planted beside the lock, at liveness-file,
// ticket and device-lock names, never hang gpuexec, status or clear.
func TestFIFOsBesideTheLockNeverHang(t *testing.T) {
	t.Parallel()
	dir := sharedDir(t, os.ModeSticky|0o777)
	lock := filepath.Join(dir, "gpu.lock")
	elsewhere := filepath.Join(dir, "some-fifo")
	const tok = "0123456789abcdef"
	shAs(t, userA, "022", fmt.Sprintf(`set -e
mkfifo %[1]s.live-zzz %[1]s.live-%[2]s %[1]s.ticket-00000000000000000001 %[3]s
ln -s %[3]s %[1]s.ticket-00000000000000000002
mkfifo %[4]s/gpu5.lock
ln -s %[3]s %[4]s/gpu6.lock
printf '%%s' '{"pid":999999,"acquiredAt":"2026-10-12T12:18:03.512Z","owner":"ghost","slug":"x","token":"%[2]s"}' > %[1]s`,
		lock, tok, elsewhere, dir))
	for _, args := range [][]string{
		{"status", "--lock", lock},
		{"status", "--lock", lock, "--json"},
		{"--lock", lock, "--wait", "10s", "--", "true"},
		{"status", "--lock", lock},
		{"clear", "--lock", lock},
	} {
		code, out, err := contextRun(15*time.Second, gpuexecBin, nil, args...)
		if err != nil || code != 0 {
			t.Fatalf("%v: %d, %v\n%s", args, code, err, out)
		}
	}
	// A link planted at the guard is refused, not followed.
	if err := os.Remove(lock + ".guard"); err != nil {
		t.Fatal(err)
	}
	shAs(t, userA, "022", fmt.Sprintf(`ln -s %s %s.guard`, elsewhere, lock))
	code, out, err := contextRun(15*time.Second, gpuexecBin, nil, "--lock", lock, "--wait", "5s", "--", "true")
	if err != nil || code != 125 || !strings.Contains(out, "not a regular file") {
		t.Fatalf("with a link at the guard: %d, %v\n%s", code, err, out)
	}
	for _, p := range []string{lock + ".live-zzz", lock + ".ticket-00000000000000000001", elsewhere} {
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("%s: %v, want the FIFO left as it was", p, err)
		}
	}
}

// Two users in group gpu share a lock in a group folder whatever their
// umask: the second queues behind the first, and clears the first's lock
// once its holder was killed.
func TestTwoUsersShareAGroupFolder(t *testing.T) {
	t.Parallel()
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	gate := filepath.Join(dir, "gate")
	a := startProc(t, gxAs(t, userA, "077", nil, "--lock", lock, "--", "/bin/sh", "-c",
		"touch "+gate+".ready; while [ ! -e "+gate+" ]; do sleep 0.02; done"))
	testsupport.Await(t, long, "user A's job to run", func() bool { return lockExists(gate + ".ready") })
	b := startProc(t, gxAs(t, userB, "077", nil, "--lock", lock, "--wait", "20s", "--", "true"))
	testsupport.Await(t, long, "user B to queue", func() bool { return strings.Contains(b.stderr(), "waiting for GPU lock") })
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wantCode(t, a.wait(t), 0)
	wantCode(t, b.wait(t), 0)
	fi, err := os.Stat(lock + ".guard")
	if err != nil || fi.Mode().Perm()&0o020 == 0 {
		t.Errorf("guard %v, %v: want it writable by the group", fi.Mode(), err)
	}

	// A user outside the group cannot take a liveness file's kernel lock
	// (and so keep a dead holder looking alive): it cannot open it.
	a = startProc(t, gxAs(t, userA, "022", nil, "--lock", lock, "--", "/bin/sh", "-c", "touch "+gate+".held; exec sleep 300"))
	testsupport.Await(t, long, "user A's job to run", func() bool { return lockExists(gate + ".held") })
	lives, _ := filepath.Glob(lock + ".live-*")
	if len(lives) != 1 {
		t.Fatalf("liveness files: %v", lives)
	}
	outsider := exec.Command("flock", "-n", "-x", lives[0], "true")
	outsider.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4343, Gid: 4343}}
	if out, err := outsider.CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("a user outside the group opened the liveness file: %v\n%s", err, out)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantCode(t, a.wait(t), 143)

	// A's gpuexec is killed with its job: B clears A's lock.
	a = startProc(t, gxAs(t, userA, "022", nil, "--lock", lock, "--", "/bin/sh", "-c", "touch "+gate+".two; exec sleep 300"))
	testsupport.Await(t, long, "user A's second job to run", func() bool { return lockExists(gate + ".two") })
	testsupport.Await(t, long, "the lock to be created", func() bool { return lockExists(lock) })
	// sh -c "umask; exec gpuexec" is gpuexec itself.
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	r := startProc(t, gxAs(t, userB, "022", nil, "--lock", lock, "--wait", "20s", "--poll", "50ms", "--", "true")).wait(t)
	wantCode(t, r, 0)
	if !strings.Contains(r.stderr, "cleared stale GPU lock") {
		t.Errorf("user B did not clear user A's stale lock:\n%s", r.stderr)
	}
}

// The default folder made by one user is not writable by another: the
// second gets one line naming the fix, not a bare "permission denied".
func TestDefaultFolderOfAnotherUser(t *testing.T) {
	t.Parallel()
	tmp := sharedDir(t, os.ModeSticky|0o777)
	env := []string{"TMPDIR=" + tmp}
	wantCode(t, startProc(t, gxAs(t, userA, "022", env, "--", "true")).wait(t), 0)
	r := startProc(t, gxAs(t, userB, "022", env, "--", "true")).wait(t)
	wantCode(t, r, 125)
	if l := lines(r.stderr); len(l) != 1 || !strings.Contains(r.stderr, "install -d -m 2775") || !strings.Contains(r.stderr, "uid 4242") {
		t.Errorf("stderr is not one line naming the owner and the fix:\n%s", r.stderr)
	}
}

// In a sticky folder only a file's owner may remove it: clearing another
// user's stale lock there fails with one line that says so.
func TestStickyFolderSaysWhyItCannotClear(t *testing.T) {
	t.Parallel()
	dir := sharedDir(t, os.ModeSticky|0o777)
	lock := filepath.Join(dir, "gpu.lock")
	shAs(t, userA, "000", fmt.Sprintf(`printf '%%s' '{"pid":999999,"acquiredAt":"2026-10-12T12:18:03.512Z","owner":"alice","slug":"x","token":"0123456789abcdef"}' > %s`, lock))
	r := startProc(t, gxAs(t, userB, "022", nil, "--lock", lock, "--wait", "5s", "--", "true")).wait(t)
	wantCode(t, r, 125)
	if l := lines(r.stderr); len(l) != 1 || !strings.Contains(r.stderr, "sticky") || !strings.Contains(r.stderr, "alice/x") {
		t.Errorf("stderr is not one line naming the holder and the sticky folder:\n%s", r.stderr)
	}
}

// A daemon the job started in a session of its own (setsid), and one left
// by a double fork, are stopped with the job before the lock is released.
func TestProcessesThatLeftTheGroupAreStopped(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("gpuexec finds them as its descendants where it is the subreaper (Linux)")
	}
	for _, tc := range []struct{ name, script string }{
		{"setsid", `setsid sh -c 'echo $$ > "$READY.d"; exec sleep 300' & sleep 0.3`},
		{"double fork ignoring TERM", `(setsid sh -c 'trap "" TERM; echo $$ > "$READY.d"; while :; do sleep 0.05; done' &); sleep 0.3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			ready := filepath.Join(t.TempDir(), "ready")
			r := gx(t, []string{"READY=" + ready}, "--lock", lock, "--kill-after", "1s", "--", "sh", "-c", tc.script)
			pids := testsupport.AwaitPIDs(t, long, ready+".d")
			testsupport.KillOnCleanup(t, pids[0])
			wantCode(t, r, 0)
			if !testsupport.Gone(pids[0]) {
				t.Fatalf("the daemon (pid %d) outlived the release:\n%s", pids[0], r.stderr)
			}
			if !strings.Contains(r.stderr, "left processes behind") {
				t.Errorf("stderr does not say processes were left:\n%s", r.stderr)
			}
			wantNoLock(t, lock)
			wantOnlyGuard(t, dir)
		})
	}
}

// A live holder whose lock file looks old (touched back, a clock jump, a
// stop) is not cleared: its liveness lock says it runs.
func TestLiveHolderWithAnOldMtimeStaysHeld(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	h := startHolder(t, lock)
	// Once the job's group is in the record, nothing rewrites it until
	// the next heartbeat, minutes away.
	testsupport.Await(t, long, "the record to name the job's group", func() bool {
		return strings.Contains(string(must(os.ReadFile(lock))), `"childPgid"`)
	})
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(lock, old, old); err != nil {
		t.Fatal(err)
	}
	r := gx(t, nil, "--lock", lock, "--stale", "1m", "--heartbeat", "10s", "--wait", "1s", "--", "true")
	wantCode(t, r, 75)
	if strings.Contains(r.stderr, "cleared") {
		t.Fatalf("a live holder's lock was cleared:\n%s", r.stderr)
	}
	m := testsupport.StatusJSON(t, long, gpuexecBin, lock)
	if m["state"] != "held" || m["alive"] != true || !strings.Contains(fmt.Sprint(m["note"]), "liveness lock is held") {
		t.Errorf("status --json %v, want held and alive by its liveness lock", m)
	}
	h.release()
	wantCode(t, h.p.wait(t), 0)
}

// Ctrl+Z (SIGTSTP) to gpuexec stops its job with it; SIGCONT continues both.
func TestStopSignalStopsTheJobWithGpuexec(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("reads process states from /proc")
	}
	_, lock := lockIn(t)
	// The job, and a process of it in a session of its own (whose group
	// is orphaned: the kernel drops SIGTSTP for it).
	strayFile := filepath.Join(t.TempDir(), "stray")
	p, pids := startShellJob(t, []string{"STRAY=" + strayFile}, []string{"--lock", lock},
		`setsid sh -c 'echo $$ > "$STRAY"; while :; do sleep 0.05; done' & echo $$ > "$READY"; while :; do sleep 0.05; done`)
	job := pids[0]
	stray := testsupport.AwaitPIDs(t, long, strayFile)[0]
	testsupport.KillOnCleanup(t, stray)
	if err := p.cmd.Process.Signal(syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	testsupport.Await(t, long, "the job to stop", func() bool { return procState(job) == 'T' })
	testsupport.Await(t, long, "the process that left the job's group to stop", func() bool { return procState(stray) == 'T' })
	testsupport.Await(t, long, "gpuexec to stop", func() bool { return procState(p.pid()) == 'T' })
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testsupport.Await(t, long, "the job to go on", func() bool { s := procState(job); return s != 'T' && s != 0 })
	testsupport.Await(t, long, "the stray to go on", func() bool { s := procState(stray); return s != 'T' && s != 0 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantCode(t, p.wait(t), 143)
	wantNoLock(t, lock)
}

// A job that ends while its gpuexec is stopped (SIGSTOP) keeps the lock held
// until gpuexec goes on, and gpuexec then reports the job's own status.
func TestJobEndedWhileGpuexecStoppedKeepsItsStatus(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("reads process states from /proc")
	}
	_, lock := lockIn(t)
	gate := filepath.Join(t.TempDir(), "gate")
	p, pids := startShellJob(t, nil, []string{"--lock", lock, "--heartbeat", "200ms"},
		`echo $$ > "$READY"; while [ ! -e `+gate+` ]; do sleep 0.02; done; exit 7`)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Signal(syscall.SIGCONT) })
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testsupport.Await(t, long, "the job to end", func() bool { s := procState(pids[0]); return s == 'Z' || s == 0 })
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(lock, old, old); err != nil {
		t.Fatal(err)
	}
	r := gx(t, nil, "--lock", lock, "--stale", "2s", "--heartbeat", "1s", "--wait", "1s", "--", "true")
	wantCode(t, r, 75)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	wantCode(t, p.wait(t), 7)
	wantNoLock(t, lock)
}

// Owners and slugs are short and plain at input; what others wrote is
// shown escaped.
func TestOwnerAndSlugAreBoundedAndEscaped(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	for _, bad := range [][]string{
		{"--owner", strings.Repeat("a", 70000)},
		{"--slug", strings.Repeat("é", 200)},
		{"--owner", "a\nb"},
		{"--slug", "x\x1b[31mred"},
	} {
		r := gx(t, nil, append(append([]string{"--lock", lock}, bad...), "--", "true")...)
		wantCode(t, r, 125)
		if l := lines(r.stderr); len(l) != 1 || !strings.Contains(r.stderr, bad[0]) {
			t.Errorf("%s %.20q: stderr is not one line naming the flag:\n%s", bad[0], bad[1], r.stderr)
		}
		wantNoLock(t, lock)
	}
	wantOnlyGuard(t, dir)

	// The seed's Node tool takes any owner: a record of its own with a
	// newline and an escape sequence in it.
	rec, _ := json.Marshal(map[string]any{"pid": os.Getpid(), "acquiredAt": "2026-10-12T12:18:03.512Z",
		"owner": "evil\n\x1b[2Jowner", "slug": "slug\r", "token": "0123456789abcdef", "note": "\u202e\u009b\x7f"})
	writeLock(t, lock, rec, 0)
	r := gx(t, nil, "status", "--lock", lock, "--json")
	wantCode(t, r, 0)
	if strings.ContainsAny(r.stdout, "\x1b\r\u202e\u009b\x7f") || !strings.Contains(r.stdout, `\u202e\u009b\u007f`) {
		t.Errorf("status --json printed what the record holds unescaped: %q", r.stdout)
	}
	r = gx(t, nil, "status", "--lock", lock)
	wantCode(t, r, 0)
	if strings.ContainsAny(r.stdout, "\x1b\r") || len(lines(r.stdout)) != 2 || !strings.Contains(r.stdout, `evil\n\x1b[2Jowner/slug\r`) {
		t.Errorf("status printed what the record holds unescaped: %q", r.stdout)
	}
	r = gx(t, nil, "--lock", lock, "--wait", "300ms", "--", "true")
	wantCode(t, r, 75)
	if strings.ContainsAny(r.stderr, "\x1b\r") || !strings.Contains(r.stderr, `evil\n\x1b[2Jowner`) {
		t.Errorf("the waiting lines show what the record holds unescaped: %q", r.stderr)
	}
}

// In a terminal the job gets the terminal: it reads what is typed, Ctrl+C
// reaches it, and Ctrl+Z stops it with gpuexec until gpuexec is continued.
func TestJobInATerminal(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the job gets the terminal on Linux only")
	}
	start := func(t *testing.T, env []string, job ...string) (*exec.Cmd, *os.File, *termOutput) {
		t.Helper()
		_, lock := lockIn(t)
		cmd := gpuexecCmd(env, append([]string{"--lock", lock, "--"}, job...)...)
		tty, err := pty.Start(cmd)
		if err != nil {
			t.Skipf("no pseudo-terminal here: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			tty.Close()
		})
		out := &termOutput{}
		go out.copy(tty)
		return cmd, tty, out
	}
	waitOut := func(t *testing.T, out *termOutput, want string) {
		t.Helper()
		testsupport.Await(t, long, fmt.Sprintf("%q on the terminal", want), func() bool { return strings.Contains(out.String(), want) })
	}
	exitCode := func(t *testing.T, cmd *exec.Cmd, out *termOutput) int {
		t.Helper()
		errc := make(chan error, 1)
		go func() { errc <- cmd.Wait() }()
		select {
		case <-errc:
			return cmd.ProcessState.ExitCode()
		case <-time.After(long):
			t.Fatalf("gpuexec did not exit within %s\n%s", long, out)
			return -1
		}
	}

	t.Run("reads what is typed", func(t *testing.T) {
		t.Parallel()
		cmd, tty, out := start(t, nil, "sh", "-c", `echo ready; read x; echo "got:$x"`)
		waitOut(t, out, "\nready")
		io.WriteString(tty, "hello\n")
		waitOut(t, out, "got:hello")
		if code := exitCode(t, cmd, out); code != 0 {
			t.Fatalf("exit %d\n%s", code, out)
		}
	})
	t.Run("Ctrl+C reaches the job", func(t *testing.T) {
		t.Parallel()
		// One process, whose SIGINT is the default from its start (a
		// shell that catches it would race the keystroke).
		ready := filepath.Join(t.TempDir(), "ready")
		cmd, tty, out := start(t, []string{role("hold"), readyEnv + "=" + ready}, helperBin)
		testsupport.Await(t, long, "the job to run", func() bool { return lockExists(ready) })
		io.WriteString(tty, "\x03")
		if code := exitCode(t, cmd, out); code != 130 {
			t.Fatalf("exit %d, want 130\n%s", code, out)
		}
	})
	t.Run("the terminal comes back after a job that moved it", func(t *testing.T) {
		t.Parallel()
		if _, err := exec.LookPath("bash"); err != nil {
			t.Skip("needs bash")
		}
		// A shell without job control runs gpuexec; an interactive
		// shell in the job puts its own job in the foreground, and the
		// timeout kills everything. The outer shell must be able to
		// read the terminal afterwards.
		_, lock := lockIn(t)
		script := fmt.Sprintf(`%s --lock %s --timeout 4s --kill-after 300ms -- bash --norc --noprofile -ic "bash -c 'trap \"\" TERM; sleep 30'; true"; echo after; read v; echo "read:$v"`, gpuexecBin, lock)
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = testsupport.Env()
		tty, err := pty.Start(cmd)
		if err != nil {
			t.Skipf("no pseudo-terminal here: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			tty.Close()
		})
		out := &termOutput{}
		go out.copy(tty)
		waitOut(t, out, "after")
		io.WriteString(tty, "ok\n")
		waitOut(t, out, "read:ok")
		exitCode(t, cmd, out)
	})
	t.Run("Ctrl+Z stops both until continued", func(t *testing.T) {
		t.Parallel()
		cmd, tty, out := start(t, nil, "sh", "-c", `echo ready; read x; echo "got:$x"`)
		waitOut(t, out, "\nready")
		io.WriteString(tty, "\x1a")
		testsupport.Await(t, long, "gpuexec to stop with its job", func() bool { return procState(cmd.Process.Pid) == 'T' })
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tty, "again\n")
		waitOut(t, out, "got:again")
		if code := exitCode(t, cmd, out); code != 0 {
			t.Fatalf("exit %d\n%s", code, out)
		}
	})
}

// termOutput collects what a pseudo-terminal prints.
type termOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *termOutput) copy(r io.Reader) {
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		o.mu.Lock()
		o.b.Write(buf[:n])
		o.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (o *termOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// A closed stderr (gpuexec ... 2>&1 | head -c10) never kills gpuexec: the
// job runs to its end and the lock is released.
func TestBrokenPipeNeverKillsGpuexec(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := gpuexecCmd(nil, "--lock", lock, "--", "sh", "-c", "sleep 0.5")
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	buf := make([]byte, 10)
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatal(err)
	}
	r.Close()
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case <-errc:
	case <-time.After(long):
		cmd.Process.Kill()
		t.Fatal("gpuexec did not exit")
	}
	if st := cmd.ProcessState; st.ExitCode() != 0 {
		t.Fatalf("gpuexec ended with %s, want exit 0", st)
	}
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

// A waiter at the head of the queue that is stopped (Ctrl+Z) keeps the
// GPU idle for a moment only: the next waiter takes the free lock, and the
// stopped one keeps its place at the front.
func TestStoppedHeadIsPassed(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	h := startHolder(t, lock)
	queued := func(n int) func() bool {
		return func() bool { return queueLen(t, lock) == n }
	}
	a := startProc(t, gpuexecCmd(nil, "--lock", lock, "--slug", "stopped", "--", "true"))
	testsupport.Await(t, long, "the first waiter to queue", queued(1))
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cmd.Process.Signal(syscall.SIGCONT) })
	b := startProc(t, gpuexecCmd(nil, "--lock", lock, "--slug", "next", "--wait", "1m", "--", "true"))
	testsupport.Await(t, long, "the second waiter to queue", queued(2))
	h.release()
	wantCode(t, h.p.wait(t), 0)
	rb := b.wait(t) // within long: well under the 90 minutes a stopped ticket used to hold it
	wantCode(t, rb, 0)
	if !strings.Contains(rb.stderr, "ahead of 1 waiter") {
		t.Errorf("the second waiter does not say it passed the first:\n%s", rb.stderr)
	}
	if a.exited() {
		t.Fatal("the stopped waiter ran while stopped")
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	wantCode(t, a.wait(t), 0)
}

// --gpu-count is bounded: no out-of-memory death, no thousands of files.
func TestGPUCountIsBounded(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"2000000000", "3000", "65"} {
		dir, lock := lockIn(t)
		r := gx(t, nil, "--lock", lock, "--gpus", "all", "--gpu-count", n, "--", "true")
		wantCode(t, r, 125)
		if l := lines(r.stderr); len(l) != 1 || !strings.Contains(r.stderr, "at most 64") {
			t.Errorf("--gpu-count %s: stderr is not one line giving the bound:\n%s", n, r.stderr)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("--gpu-count %s left %d files", n, len(ents))
		}
	}
}

// A gpuexec run inside a job that holds the same lock runs its command at
// once (reentrant) and says so; one whose environment only claims it
// queues as anyone.
func TestNestedGpuexecRunsAtOnce(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The same folder by another way: the holder's path is resolved.
	linked := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, linked); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		env   []string
		outer []string
		inner string
	}{
		{"GPUEXEC_LOCK set by the user", []string{"GPUEXEC_LOCK=" + lock}, nil, ""},
		{"--lock at both levels", nil, []string{"--lock", lock}, "--lock " + lock},
		{"--lock through a link", []string{"GPUEXEC_LOCK=" + filepath.Join(linked, "gpu.lock")}, nil, ""},
	} {
		script := fmt.Sprintf(`%s %s --wait 3s -- sh -c 'echo inner ran'`, gpuexecBin, tc.inner)
		r := gx(t, tc.env, append(tc.outer, "--wait", "10s", "--", "sh", "-c", script)...)
		wantCode(t, r, 0)
		if !strings.Contains(r.stdout, "inner ran") || !strings.Contains(r.stderr, "reentrant") {
			t.Errorf("%s: the inner gpuexec did not run at once:\nstdout:\n%s\nstderr:\n%s", tc.name, r.stdout, r.stderr)
		}
	}

	// Claims are not trusted: neither a wrong token, nor the right one
	// (anyone can read it in the record) outside the holder's job.
	h := startHolder(t, lock)
	for _, token := range []string{"0000000000000000", readRecord(t, lock).Token} {
		forged := []string{"GPUEXEC_LOCK_HELD=1", "GPUEXEC_LOCK_PATH=" + lock, "GPUEXEC_LOCK_TOKEN=" + token}
		r := gx(t, forged, "--lock", lock, "--wait", "300ms", "--", "true")
		wantCode(t, r, 75)
	}
	h.release()
	wantCode(t, h.p.wait(t), 0)
}

// Only rivals order each other: a waiter for GPU 1 does not wait behind one
// for GPU 0. But the plain lock stands for every GPU: a device job waits
// behind a plain waiter, and a plain job behind a device holder.
func TestOnlyRivalsOrderEachOther(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	gpu0 := filepath.Join(filepath.Dir(lock), "gpu0.lock")
	h0 := startHolder(t, gpu0)
	w0 := startProc(t, gpuexecCmd(nil, "--lock", lock, "--gpus", "0", "--wait", "1m", "--", "true"))
	testsupport.Await(t, long, "a waiter for GPU 0", func() bool { return strings.Contains(w0.stderr(), "waiting for GPU") })
	r := gx(t, nil, "--lock", lock, "--gpus", "1", "--wait", "3s", "--", "true")
	wantCode(t, r, 0)
	// The plain lock waits for GPU 0, and a GPU 1 job behind the plain
	// waiter for it: the plain job needs every GPU.
	w := startProc(t, gpuexecCmd(nil, "--lock", lock, "--wait", "1m", "--", "true"))
	testsupport.Await(t, long, "a waiter for the plain lock", func() bool { return strings.Contains(w.stderr(), "its GPUs are held") })
	r = gx(t, nil, "--lock", lock, "--gpus", "1", "--wait", "1s", "--", "true")
	wantCode(t, r, 75)

	h0.release()
	wantCode(t, h0.p.wait(t), 0)
	wantCode(t, w0.wait(t), 0)
	wantCode(t, w.wait(t), 0)
}

// clear --force never puts two jobs on the card: the holder stops its job
// at once, and the lock stays held until that job is gone.
func TestForcedClearNeverPutsTwoJobsOnTheCard(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	work := t.TempDir()
	running, overlap := filepath.Join(work, "running"), filepath.Join(work, "overlap")
	// The holder's job takes a second to stop after SIGTERM.
	h, _ := startShellJob(t, nil, []string{"--lock", lock},
		`trap 'sleep 1; rm -f `+running+`; exit 0' TERM; touch `+running+`; echo $$ > "$READY"; while :; do sleep 0.02; done`)
	w := startProc(t, gpuexecCmd(nil, "--lock", lock, "--wait", "1m", "--", "sh", "-c",
		`if [ -e `+running+` ]; then echo overlap > `+overlap+`; fi`))
	testsupport.Await(t, long, "the waiter to queue", func() bool { return strings.Contains(w.stderr(), "waiting for GPU lock") })
	r := gx(t, nil, "clear", "--lock", lock, "--force")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "stays held until that job is gone") {
		t.Errorf("clear --force does not say what happens to the job:\n%s", r.stdout)
	}
	hr := h.wait(t) // at once, not at its next heartbeat (5 minutes)
	wantCode(t, hr, 125)
	if !strings.Contains(hr.stderr, "lost") {
		t.Errorf("the holder does not say its lock was lost:\n%s", hr.stderr)
	}
	wantCode(t, w.wait(t), 0)
	if b, err := os.ReadFile(overlap); err == nil {
		t.Fatalf("two jobs ran at once after a forced clear: %s", b)
	}
}

// A path that is no lock is refused before anything is created beside it.
func TestRefusedLockPathCreatesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(lock string) error
	}{
		{"FIFO", func(lock string) error { return syscall.Mkfifo(lock, 0o644) }},
		{"folder", func(lock string) error { return os.Mkdir(lock, 0o755) }},
		{"text", func(lock string) error { return os.WriteFile(lock, []byte("not a lock\n"), 0o644) }},
		{"symlink", func(lock string) error { return os.Symlink("/dev/null", lock) }},
	} {
		dir := t.TempDir()
		lock := filepath.Join(dir, "gpu.lock")
		if err := tc.setup(lock); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"--lock", lock, "--", "true"}, {"--lock", lock, "--wait", "0", "--", "true"},
			{"--lock", lock, "--gpus", "0", "--", "true"},
			{"clear", "--lock", lock}, {"clear", "--force", "--lock", lock}, {"status", "--lock", lock},
		} {
			r := gx(t, nil, args...)
			wantCode(t, r, 125)
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("%s: the folder holds %v, want the lock path alone", tc.name, names)
		}
	}
}

// --log naming a FIFO or a link is refused at once; intervals have sane
// minimums.
func TestLogAndIntervalsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	fifo := filepath.Join(t.TempDir(), "log")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(filepath.Join(t.TempDir(), "target"), link); err != nil {
		t.Fatal(err)
	}
	// A folder others may write: they could swap the log for a link
	// between gpuexec's check and the logger's own open.
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, os.ModeSetgid|0o775); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--log", fifo}, {"--log", link}, {"--log", filepath.Join(open, "gpuexec.log")},
		{"--heartbeat", "1ns"}, {"--poll", "1ns"}, {"--report", "0s"}, {"--stale", "100us", "--heartbeat", "50us"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), long)
		cmd := exec.CommandContext(ctx, gpuexecBin, append(append([]string{"--lock", lock}, args...), "--", "true")...)
		cmd.Env = testsupport.Env()
		out, _ := cmd.CombinedOutput()
		hung := ctx.Err() != nil
		cancel()
		if hung {
			t.Fatalf("%v hung", args)
		}
		if code := cmd.ProcessState.ExitCode(); code != 125 || len(lines(string(out))) != 1 {
			t.Errorf("%v: exit %d, want 125 and one line:\n%s", args, code, out)
		}
	}
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

// procState is the state of process pid in /proc ('T': stopped, 'Z':
// zombie); 0 once it is gone.
func procState(pid int) byte {
	st, _ := testsupport.ProcStat(pid)
	return st.State
}

// must returns v, ignoring err: for reads in conditions that are polled.
func must[T any](v T, _ error) T { return v }

// Folders that another user could move away or point elsewhere are never
// used by name, for the lock or for --log: a group member must not be able
// to send root's gpuexec to create or write files in a folder of root's.
func TestFoldersOthersControlAreRefused(t *testing.T) {
	t.Parallel()
	tmp := sharedDir(t, os.ModeSticky|0o777)
	group := sharedDir(t, os.ModeSetgid|0o775)
	rootOnly := filepath.Join(t.TempDir(), "root-only")
	if err := os.Mkdir(rootOnly, 0o755); err != nil {
		t.Fatal(err)
	}
	shAs(t, userA, "022", fmt.Sprintf("mkdir %[1]s/team && ln -s %[2]s %[1]s/logs && ln -s %[2]s %[3]s/gpuexec",
		group, rootOnly, tmp))
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		says string
	}{
		{"default folder: another user's link", []string{"TMPDIR=" + tmp}, []string{"--", "true"}, "uid 4242"},
		{"status through it", []string{"TMPDIR=" + tmp}, []string{"status"}, "uid 4242"},
		{"a subfolder of a group folder", nil, []string{"--lock", filepath.Join(group, "team", "gpu.lock"), "--", "true"}, "may be written by others"},
		{"--log through another user's link", nil, []string{"--lock", filepath.Join(t.TempDir(), "gpu.lock"), "--log", filepath.Join(group, "logs", "run.log"), "--", "true"}, "could move logs away"},
		{"--log in a group folder", nil, []string{"--lock", filepath.Join(t.TempDir(), "gpu.lock"), "--log", filepath.Join(group, "run.log"), "--", "true"}, "may be written by others"},
	} {
		r := gx(t, tc.env, tc.args...)
		wantCode(t, r, 125)
		if l := lines(r.stderr); len(l) != 1 || !strings.Contains(r.stderr, tc.says) {
			t.Errorf("%s: stderr is not one line saying %q:\n%s", tc.name, tc.says, r.stderr)
		}
	}
	if ents, _ := os.ReadDir(rootOnly); len(ents) != 0 {
		t.Errorf("files were made in root's folder through another user's link: %d", len(ents))
	}
}

func init() {
	// join PGID: move into process group PGID (setpgid), write the pid to
	// $GPUEXEC_TEST_READY, and run until killed.
	helperRoles["join"] = func(args []string) int {
		pg, err := strconv.Atoi(args[0])
		if err == nil {
			err = syscall.Setpgid(0, pg)
		}
		if err == nil {
			err = testsupport.WriteAtomic(os.Getenv(readyEnv), []byte(strconv.Itoa(os.Getpid())+"\n"))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper join:", err)
			return 2
		}
		time.Sleep(time.Hour)
		return 0
	}
}

// A process of the job that joins a group it does not own (setpgid into
// another group of the session) is stopped alone: that group's other
// members are not the job's and are never signalled.
func TestStrayInAForeignGroupIsStoppedAlone(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("strays are found on Linux")
	}
	victim := exec.Command("sleep", "60")
	victim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer victim.Process.Kill()
	exited := make(chan struct{})
	go func() { victim.Wait(); close(exited) }()

	_, lock := lockIn(t)
	ready := filepath.Join(t.TempDir(), "ready")
	p := startProc(t, gpuexecCmd([]string{role("join"), readyEnv + "=" + ready},
		"--lock", lock, "--kill-after", "300ms", "--", helperBin, strconv.Itoa(victim.Process.Pid)))
	job := testsupport.AwaitPIDs(t, long, ready)[0]
	testsupport.KillOnCleanup(t, job)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	testsupport.Await(t, long, "the job to be stopped", func() bool { return testsupport.Gone(job) })
	select {
	case <-exited:
		t.Fatal("a process in the group the job joined, not the job's, was killed")
	default:
	}
}
