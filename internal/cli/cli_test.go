package cli

// Black-box tests of the gpuexec binary: TestMain builds it once and every
// test runs it as a user would, as a separate process, on a lock under
// t.TempDir(). The test binary doubles as the job gpuexec runs (see
// helperRoles), so that these tests need no shell and run on every OS; the
// Unix-only behaviour (signals, process groups) is in cli_unix_test.go.

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// Environment of the test binary started as a helper process (a job run by
// gpuexec). They reach the job through gpuexec, which passes its
// environment on.
const (
	roleEnv  = "GPUEXEC_TEST_ROLE"  // which helper role to play; see helperRoles
	outEnv   = "GPUEXEC_TEST_OUT"   // where the dump and ids roles write
	readyEnv = "GPUEXEC_TEST_READY" // where the hold role writes its pid once running
)

// long bounds every wait for a condition. Generous: the tests must pass on a
// loaded two-core machine.
const long = 20 * time.Second

var (
	gpuexecBin string // the gpuexec binary built by TestMain
	helperBin  string // this test binary, run as a job by gpuexec
)

// helperRoles are what this test binary does when it runs as a job
// (GPUEXEC_TEST_ROLE set): the role's return value is its exit status.
// cli_unix_test.go adds Unix-only roles.
var helperRoles = map[string]func(args []string) int{
	// exit CODE: exit with CODE.
	"exit": func(args []string) int {
		code, err := strconv.Atoi(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper exit:", err)
			return 2
		}
		return code
	},
	// dump: write what the job sees (argv, environment, lock record,
	// pid, parent pid) as JSON to $GPUEXEC_TEST_OUT.
	"dump": func(args []string) int {
		d := jobDump{
			Args: args,
			PID:  os.Getpid(),
			PPID: os.Getppid(),
		}
		d.Held, d.HeldSet = os.LookupEnv("GPUEXEC_LOCK_HELD")
		d.Lock = os.Getenv("GPUEXEC_LOCK_PATH")
		if b, err := os.ReadFile(d.Lock); err != nil {
			d.RecordErr = err.Error()
		} else {
			d.Record = string(b)
		}
		b, err := json.Marshal(d)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper dump:", err)
			return 2
		}
		if err := testsupport.WriteAtomic(os.Getenv(outEnv), b); err != nil {
			fmt.Fprintln(os.Stderr, "helper dump:", err)
			return 2
		}
		return 0
	},
	// hold: write the pid to $GPUEXEC_TEST_READY, then run until stdin
	// reaches EOF.
	"hold": func(args []string) int {
		if err := testsupport.WriteAtomic(os.Getenv(readyEnv), []byte(strconv.Itoa(os.Getpid()))); err != nil {
			fmt.Fprintln(os.Stderr, "helper hold:", err)
			return 2
		}
		io.Copy(io.Discard, os.Stdin)
		return 0
	},
}

// jobDump is what the dump role writes.
type jobDump struct {
	Args      []string `json:"args"`
	Held      string   `json:"held"`
	HeldSet   bool     `json:"heldSet"`
	Lock      string   `json:"lock"`
	Record    string   `json:"record"`
	RecordErr string   `json:"recordErr"`
	PID       int      `json:"pid"`
	PPID      int      `json:"ppid"`
}

func TestMain(m *testing.M) {
	// Run as nvidia-smi (the fake answers only nvidia-smi's queries).
	gputest.Main()
	// Run as a program of the scripts' jobs (TestScripts).
	if tool := toolNamed(os.Args[0]); tool != nil {
		os.Exit(tool(os.Args[1:]))
	}
	if role := os.Getenv(roleEnv); role != "" {
		fn, ok := helperRoles[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown %s %q\n", roleEnv, role)
			os.Exit(2)
		}
		os.Exit(fn(os.Args[1:]))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	// Every temporary file of these tests and of what they start is in
	// dir, removed once they have run: a job's TMPDIR, the default lock of
	// a gpuexec without --lock, the copies other users run.
	dir, err := testsupport.OwnTempDir("gpuexec-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	testDir = dir
	if prebuilt := os.Getenv("GPUEXEC_TEST_BINARY"); prebuilt != "" {
		// Built beforehand, where no Go toolchain runs the tests
		// (Windows test binaries under Wine: winetest/run).
		gpuexecBin = prebuilt
	} else {
		// In a folder of its own, so that a PATH of that folder alone
		// finds no other command (TestScripts).
		bin := filepath.Join(dir, "bin")
		if err := os.Mkdir(bin, 0o700); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if gpuexecBin, err = testsupport.Build(bin, "gpuexec", "github.com/gpuexec/gpuexec"); err != nil {
			fmt.Fprintln(os.Stderr, "building gpuexec:", err)
			return 1
		}
	}
	if helperBin, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// testDir is the folder of this test process's temporary files (see
// testsupport.OwnTempDir).
var testDir string

// repoFile is the path of a file of the repository, name given from its
// root with slashes: under $GPUEXEC_TEST_REPO (winetest/run sets it, its
// test binaries running outside the repository), else under the nearest
// folder above the current one that holds go.mod (go test runs these tests
// in internal/cli), else name itself, relative, where no folder above holds
// one.
func repoFile(name string) string {
	return filepath.Join(repoRoot(), filepath.FromSlash(name))
}

// repoRoot is the repository's folder, as repoFile finds it; "" where it
// finds none.
func repoRoot() string {
	if dir := os.Getenv("GPUEXEC_TEST_REPO"); dir != "" {
		return dir
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

// What these tests and the processes they start write lies in testDir, so
// that a run leaves nothing in the machine's temporary folder and never
// touches its default lock: t.TempDir's folders, and the temporary folder
// of a child, where a gpuexec without --lock would take its lock (--help
// names it).
func TestTempFilesStayInTestDir(t *testing.T) {
	t.Parallel()
	in := func(what, path string) {
		t.Helper()
		if rel, err := filepath.Rel(testDir, path); err != nil || !filepath.IsLocal(rel) {
			t.Errorf("%s, %s, is not in %s", what, path, testDir)
		}
	}
	in("t.TempDir()", t.TempDir())
	r := gx(t, nil, "--help")
	wantCode(t, r, 0)
	m := regexp.MustCompile(`--lock PATH .*\(default: "([^"]+)"\)`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("--help names no default lock:\n%s", r.stdout)
	}
	in("the default lock of a gpuexec run without --lock", m[1])
}

// gpuexecCmd is gpuexec with args and, on top of testsupport.Env, env.
func gpuexecCmd(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(gpuexecBin, args...)
	cmd.Env = testsupport.Env(env...)
	return cmd
}

// role is the environment entry that makes the test binary play role.
func role(name string) string { return roleEnv + "=" + name }

// proc is a started process whose stdout and stderr go to files, so that
// they can be read while it runs and so that processes it leaves behind
// holding them never delay Wait.
type proc struct {
	cmd     *exec.Cmd
	outPath string
	errPath string
	done    chan struct{}
	err     error // of Wait, once done is closed
}

// result is how a process ended.
type result struct {
	code           int // exit status; -1 when killed by a signal
	state          string
	stdout, stderr string
}

func startProc(t testing.TB, cmd *exec.Cmd) *proc {
	t.Helper()
	dir := t.TempDir()
	p := &proc{
		cmd:     cmd,
		outPath: filepath.Join(dir, "stdout"),
		errPath: filepath.Join(dir, "stderr"),
		done:    make(chan struct{}),
	}
	out, err := os.Create(p.outPath)
	if err != nil {
		t.Fatal(err)
	}
	errf, err := os.Create(p.errPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, errf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", cmd.Args, err)
	}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		errf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) stdout() string { b, _ := os.ReadFile(p.outPath); return string(b) }
func (p *proc) stderr() string { b, _ := os.ReadFile(p.errPath); return string(b) }

// wait waits (at most long) for the process to exit.
func (p *proc) wait(t testing.TB) result {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(long):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%v did not exit within %s; killed it\nstderr:\n%s", p.cmd.Args, long, p.stderr())
	}
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		t.Fatalf("%v: %v", p.cmd.Args, p.err)
	}
	return result{
		code:   p.cmd.ProcessState.ExitCode(),
		state:  p.cmd.ProcessState.String(),
		stdout: p.stdout(),
		stderr: p.stderr(),
	}
}

// gx runs gpuexec to the end.
func gx(t testing.TB, env []string, args ...string) result {
	t.Helper()
	return startProc(t, gpuexecCmd(env, args...)).wait(t)
}

// wantCode fails the test unless r ended with code.
func wantCode(t testing.TB, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d (%s), want %d\nstdout:\n%s\nstderr:\n%s", r.code, r.state, code, r.stdout, r.stderr)
	}
}

// lockIn returns a lock path in a folder of its own (not created) under a
// fresh temporary folder.
func lockIn(t testing.TB) (dir, lock string) {
	dir = filepath.Join(t.TempDir(), "locks")
	return dir, filepath.Join(dir, "gpu.lock")
}

// queueLen is how many waiters status --json lists for lock.
func queueLen(t *testing.T, lock string) int {
	q, _ := testsupport.StatusJSON(t, long, gpuexecBin, lock)["queue"].([]any)
	return len(q)
}

func lockExists(lock string) bool {
	_, err := os.Lstat(lock)
	return err == nil
}

func wantNoLock(t testing.TB, lock string) {
	t.Helper()
	if _, err := os.Lstat(lock); !errors.Is(err, fs.ErrNotExist) {
		b, _ := os.ReadFile(lock)
		t.Fatalf("lock file %s left behind (%v): %q", lock, err, b)
	}
}

// wantOnlyGuard fails unless dir holds nothing but the permanent guard
// sidecar of gpu.lock and its jobs' journal (or is missing): no lock file,
// no *.stale-* or *.tmp-* file.
func wantOnlyGuard(t testing.TB, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "gpu.lock.guard" && e.Name() != "gpu.lock.journal" {
			t.Errorf("left behind in the lock folder: %s", e.Name())
		}
	}
}

// record is a parsed lock file.
type record struct {
	PID   int    `json:"pid"`
	Owner string `json:"owner"`
	Slug  string `json:"slug"`
	Token string `json:"token"`
}

func readRecord(t testing.TB, lock string) record {
	t.Helper()
	b, err := os.ReadFile(lock)
	if err != nil {
		t.Fatal(err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("lock record %q: %v", b, err)
	}
	return r
}

// seedRecord is a lock record as the seed's Node tool writes it.
func seedRecord(pid int, owner, slug, token string) []byte {
	return fmt.Appendf(nil, `{"pid":%d,"acquiredAt":%q,"owner":%q,"slug":%q,"token":%q}`,
		pid, time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), owner, slug, token)
}

// writeLock writes a lock file by hand, with an mtime age ago.
func writeLock(t testing.TB, lock string, content []byte, age time.Duration) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(lock), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lock, content, 0o644); err != nil {
		t.Fatal(err)
	}
	mt := time.Now().Add(-age)
	if err := os.Chtimes(lock, mt, mt); err != nil {
		t.Fatal(err)
	}
}

// holder is a gpuexec holding a lock while its job (the hold role) runs
// until released.
type holder struct {
	p       *proc
	stdin   *os.File
	release func()
}

const holderOwner, holderSlug = "holder-owner", "holder-slug"

// startHolder starts gpuexec --lock lock --owner holder-owner --slug
// holder-slug [extra] on a job that runs until release is called, and waits
// until the job runs.
func startHolder(t testing.TB, lock string, extra ...string) *holder {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--lock", lock, "--owner", holderOwner, "--slug", holderSlug}, extra...)
	args = append(args, "--", helperBin)
	cmd := gpuexecCmd([]string{role("hold"), readyEnv + "=" + ready}, args...)
	cmd.Stdin = r
	h := &holder{stdin: w}
	h.release = func() { w.Close() }
	h.p = startProc(t, cmd)
	r.Close()
	t.Cleanup(h.release)
	testsupport.Await(t, long, "the holder's job to run", func() bool {
		if h.p.exited() {
			t.Fatalf("holder exited early: %s\nstderr:\n%s", h.p.cmd.ProcessState, h.p.stderr())
		}
		_, err := os.Stat(ready)
		return err == nil
	})
	return h
}

// exitCase is a run of gpuexec and how it must end.
type exitCase struct {
	name string
	// args is the command line, given a lock path in a folder that does
	// not exist yet.
	args   func(t *testing.T, lock string) []string
	env    []string // on top of testsupport.Env
	want   int      // the exit status
	stderr string   // a substring of stderr
}

// testExitCases runs each case in a parallel subtest, on a lock of its own,
// and checks its exit status and stderr, and that it leaves nothing behind.
func testExitCases(t *testing.T, cases []exitCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			r := gx(t, tc.env, tc.args(t, lock)...)
			wantCode(t, r, tc.want)
			if !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, r.stderr)
			}
			wantNoLock(t, lock)
			wantOnlyGuard(t, dir)
		})
	}
}

// lines splits output into lines, dropping a final newline.
func lines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestDeferredWhileHeld(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	h := startHolder(t, lock)
	before := readRecord(t, lock)
	if before.PID != h.p.pid() || before.Owner != holderOwner || before.Slug != holderSlug {
		t.Fatalf("holder's record %+v, want pid %d %s/%s", before, h.p.pid(), holderOwner, holderSlug)
	}
	holderName := fmt.Sprintf("%s/%s (pid %d)", holderOwner, holderSlug, h.p.pid())
	cases := []struct {
		name   string
		args   []string
		stderr []string
	}{
		{"wait 0", []string{"--wait", "0"}, []string{holderName, "--wait 0"}},
		{"wait elapses", []string{"--wait", "300ms", "--poll", "10ms"}, []string{"waiting for GPU lock: held by " + holderName, "gave up waiting", holderName}},
		{"wait from environment", []string{"--poll", "10ms"}, []string{"gave up waiting", holderName}},
	}
	t.Run("group", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				args := append([]string{"--lock", lock}, tc.args...)
				args = append(args, "--", helperBin, "0")
				start := time.Now()
				r := gx(t, []string{role("exit"), "GPUEXEC_WAIT=200ms"}, args...)
				wantCode(t, r, 75)
				for _, s := range tc.stderr {
					if !strings.Contains(r.stderr, s) {
						t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
					}
				}
				if strings.Contains(r.stderr, "job started") {
					t.Errorf("the job ran:\n%s", r.stderr)
				}
				if d := time.Since(start); d > 15*time.Second {
					t.Errorf("gave up after %s", d)
				}
			})
		}
	})
	if after := readRecord(t, lock); after.Token != before.Token || after.PID != before.PID {
		t.Fatalf("the holder's lock changed under it: %+v, was %+v", after, before)
	}
	h.release()
	wantCode(t, h.p.wait(t), 0)
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

var (
	isoMillisRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	tokenRE     = regexp.MustCompile(`^[0-9a-f]{16}$`)
)

// runDump runs the dump role under gpuexec and returns what it saw.
func runDump(t *testing.T, env []string, dir string, gpuexecArgs []string, jobArgs ...string) (*proc, jobDump) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "dump.json")
	args := append(slices.Clone(gpuexecArgs), "--", helperBin)
	args = append(args, jobArgs...)
	cmd := gpuexecCmd(append([]string{role("dump"), outEnv + "=" + out}, env...), args...)
	cmd.Dir = dir
	p := startProc(t, cmd)
	wantCode(t, p.wait(t), 0)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the job wrote nothing: %v\nstderr:\n%s", err, p.stderr())
	}
	var d jobDump
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return p, d
}

// samePath compares paths after resolving symbolic links in their folders
// (temporary folders are often reached through one).
func samePath(a, b string) bool {
	ra, err1 := filepath.EvalSymlinks(filepath.Dir(a))
	rb, err2 := filepath.EvalSymlinks(filepath.Dir(b))
	return err1 == nil && err2 == nil && filepath.Join(ra, filepath.Base(a)) == filepath.Join(rb, filepath.Base(b))
}

func TestJobSeesLockAndVerbatimArgv(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	lock := filepath.Join(work, "rel", "gpu.lock")
	argv := []string{"a b", `"quoted"`, "it's", "--", "--lock", "x", "", "$HOME", "*", "status", "-x=1", "ünï"}
	// A relative --lock; an inherited GPUEXEC_LOCK_HELD that must not
	// reach the job as it is.
	p, d := runDump(t, []string{"GPUEXEC_LOCK_HELD=0"}, work,
		[]string{"--lock", filepath.Join("rel", "gpu.lock")}, argv...)
	if !slices.Equal(d.Args, argv) {
		t.Errorf("job argv %q, want %q", d.Args, argv)
	}
	if !d.HeldSet || d.Held != "1" {
		t.Errorf("GPUEXEC_LOCK_HELD = %q (set %v), want 1", d.Held, d.HeldSet)
	}
	if !filepath.IsAbs(d.Lock) || !samePath(d.Lock, lock) {
		t.Errorf("GPUEXEC_LOCK = %q, want the absolute %q", d.Lock, lock)
	}
	if d.RecordErr != "" {
		t.Errorf("the job could not read the lock: %s", d.RecordErr)
	}
	if d.PPID != p.pid() {
		t.Errorf("job's parent is %d, want gpuexec (%d)", d.PPID, p.pid())
	}
	wantNoLock(t, lock)
}

// Flags come from GPUEXEC_* variables, and the lock record holds the seed's
// five fields with the seed's formats.
func TestLockRecord(t *testing.T) {
	t.Parallel()
	// The command's base name; on Windows without ".exe" (see commandName).
	jobName := strings.TrimSuffix(filepath.Base(helperBin), ".exe")
	cases := []struct {
		name           string
		env            []string
		args           func(lock string) []string
		owner, slug    string
		lockFromEnvToo bool
	}{
		{
			name: "flags", owner: "flag-owner", slug: "flag-slug",
			args: func(lock string) []string {
				return []string{"--lock", lock, "--owner", "flag-owner", "--slug", "flag-slug"}
			},
		},
		{
			name: "environment", owner: "env-owner", slug: "env-slug",
			env:  []string{"GPUEXEC_OWNER=env-owner", "GPUEXEC_SLUG=env-slug"},
			args: func(lock string) []string { return nil }, lockFromEnvToo: true,
		},
		{
			name: "flags win over environment", owner: "flag-owner", slug: "flag-slug",
			env: []string{"GPUEXEC_OWNER=env-owner", "GPUEXEC_SLUG=env-slug"},
			args: func(lock string) []string {
				return []string{"--lock", lock, "--owner", "flag-owner", "--slug", "flag-slug"}
			},
		},
		{
			name: "default slug is the command's base name", owner: "o", slug: jobName,
			args: func(lock string) []string { return []string{"--lock", lock, "--owner", "o"} },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			env := tc.env
			if tc.lockFromEnvToo {
				env = append(slices.Clone(env), "GPUEXEC_LOCK="+lock)
			}
			p, d := runDump(t, env, t.TempDir(), tc.args(lock))
			if !samePath(d.Lock, lock) {
				t.Errorf("job's GPUEXEC_LOCK %q, want %q", d.Lock, lock)
			}
			var rec map[string]any
			dec := json.NewDecoder(strings.NewReader(d.Record))
			dec.UseNumber()
			if err := dec.Decode(&rec); err != nil {
				t.Fatalf("lock record %q (%s): %v", d.Record, d.RecordErr, err)
			}
			// The seed's five fields, with the seed's types; gpuexec may
			// add others.
			for _, k := range []string{"pid", "acquiredAt", "owner", "slug", "token"} {
				if _, ok := rec[k]; !ok {
					t.Errorf("record %s lacks %q", d.Record, k)
				}
			}
			if n, ok := rec["pid"].(json.Number); !ok || n.String() != strconv.Itoa(p.pid()) || d.PPID != p.pid() {
				t.Errorf("record pid %v, want gpuexec's pid %d (the job's parent: %d)", rec["pid"], p.pid(), d.PPID)
			}
			if s, _ := rec["acquiredAt"].(string); !isoMillisRE.MatchString(s) {
				t.Errorf("acquiredAt %v is not UTC ISO-8601 with milliseconds", rec["acquiredAt"])
			}
			if s, _ := rec["token"].(string); !tokenRE.MatchString(s) {
				t.Errorf("token %v is not 16 lowercase hex digits", rec["token"])
			}
			if rec["owner"] != tc.owner || rec["slug"] != tc.slug {
				t.Errorf("owner/slug %v/%v, want %s/%s", rec["owner"], rec["slug"], tc.owner, tc.slug)
			}
			wantNoLock(t, lock)
			wantOnlyGuard(t, dir)
		})
	}
}

func TestStatusAndClearOfLiveGpuexec(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	// A fast heartbeat, so that the holder notices a forced clear.
	h := startHolder(t, lock, "--heartbeat", "20ms")
	name := fmt.Sprintf("%s/%s (pid %d)", holderOwner, holderSlug, h.p.pid())

	r := gx(t, nil, "status", "--lock", lock)
	wantCode(t, r, 0)
	if !strings.HasPrefix(r.stdout, "held by "+name) || !strings.Contains(r.stdout, "alive") {
		t.Errorf("status %q, want held by %s, alive", r.stdout, name)
	}
	m := testsupport.StatusJSON(t, long, gpuexecBin, lock)
	if m["state"] != "held" || m["alive"] != true || m["owner"] != holderOwner || m["slug"] != holderSlug ||
		m["pid"] != float64(h.p.pid()) || m["staleReason"] != nil {
		t.Errorf("status --json %v", m)
	}
	before := readRecord(t, lock)

	// --gpus and GPUEXEC_GPUS are for jobs and status: clear, which has
	// no such flag, acts on --lock whatever they say.
	for _, env := range [][]string{nil, {"GPUEXEC_GPUS=0,1"}, {"GPUEXEC_GPUS=all"}} {
		r = gx(t, env, "clear", "--lock", lock)
		wantCode(t, r, 1)
		if !strings.Contains(r.stderr, name) {
			t.Errorf("%v: clear's refusal does not name the holder %s:\n%s", env, name, r.stderr)
		}
	}
	if after := readRecord(t, lock); after.Token != before.Token {
		t.Fatalf("clear changed the lock: %+v", after)
	}

	r = gx(t, nil, "clear", "--lock", lock, "--force")
	wantCode(t, r, 0)
	if !strings.HasPrefix(r.stdout, "cleared (forced): held by "+name) || r.stderr != "" {
		t.Errorf("clear --force: want its result on stdout alone; stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	wantNoLock(t, lock)
	// The holder finds its lock gone at its next heartbeat and stops the
	// job (--on-lost stop), so that two jobs never share the GPU.
	hr := h.p.wait(t)
	wantCode(t, hr, 125)
	if !strings.Contains(hr.stderr, "lost") {
		t.Errorf("holder's stderr does not say the lock was lost:\n%s", hr.stderr)
	}
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

func TestStaleLockIsClearedByTheNextJob(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	dead := testsupport.DeadPID(t)
	writeLock(t, lock, seedRecord(dead, "ghost", "old", "0123456789abcdef"), 0)
	r := gx(t, []string{role("exit")}, "--lock", lock, "--wait", "5s", "--poll", "10ms", "--", helperBin, "0")
	wantCode(t, r, 0)
	var cleared string
	for _, l := range lines(r.stderr) {
		if strings.Contains(l, "cleared stale GPU lock") {
			cleared = l
		}
	}
	if cleared == "" || !strings.Contains(cleared, fmt.Sprintf("pid %d is gone", dead)) || !strings.Contains(cleared, "ghost/old") {
		t.Errorf("no log line clearing ghost/old with the reason pid %d is gone:\n%s", dead, r.stderr)
	}
	wantNoLock(t, lock)
	wantOnlyGuard(t, dir)
}

func TestLogFile(t *testing.T) {
	t.Parallel()
	messages := []string{"acquired GPU lock", "job started", "job exited", "releasing GPU lock"}
	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", asJSON), func(t *testing.T) {
			t.Parallel()
			_, lock := lockIn(t)
			logFile := filepath.Join(t.TempDir(), "logs", "gpuexec.log")
			args := []string{"--lock", lock, "--log", logFile}
			if asJSON {
				args = append(args, "--log-json")
			}
			args = append(args, "--", helperBin, "0")
			wantCode(t, gx(t, []string{role("exit")}, args...), 0)
			b, err := os.ReadFile(logFile)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range lines(string(b)) {
				if !asJSON {
					got = append(got, l)
					continue
				}
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("log line %q is not JSON: %v", l, err)
				}
				msg, ok := m["@message"].(string)
				if !ok {
					t.Fatalf("log line %q has no @message", l)
				}
				got = append(got, msg)
			}
			for _, want := range messages {
				if !slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, want) }) {
					t.Errorf("log file lacks %q:\n%s", want, b)
				}
			}
		})
	}
}

// contextRun runs cmd to the end or until timeout, returning its combined
// output; for use off the test's goroutine.
func contextRun(timeout time.Duration, name string, env []string, args ...string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = testsupport.Env(env...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return -1, string(out), err
	}
	if ctx.Err() != nil {
		return -1, string(out), fmt.Errorf("did not finish within %s", timeout)
	}
	return cmd.ProcessState.ExitCode(), string(out), nil
}

// status --check prints as usual and exits 0 when free, 1 when held by a
// live holder, 2 when stale, 125 when the lock cannot be read; with --gpus,
// 0 when a device is free, else 2 when one is stale, else 1.
func TestStatusCheck(t *testing.T) {
	t.Parallel()
	dead := testsupport.DeadPID(t)
	live := seedRecord(os.Getpid(), "me", "busy", "00112233aabbccdd")
	stale := seedRecord(dead, "ghost", "old", "0123456789abcdef")
	cases := []struct {
		name  string
		files map[string][]byte // in the lock's folder; nil content: a folder
		gpus  string
		want  int
		out   string // a prefix of stdout
	}{
		{name: "free", want: 0, out: "free"},
		{name: "held", files: map[string][]byte{"gpu.lock": live}, want: 1, out: "held by me/busy"},
		{name: "stale", files: map[string][]byte{"gpu.lock": stale}, want: 2, out: "stale"},
		{name: "unreadable", files: map[string][]byte{"gpu.lock": nil}, want: 125},
		{name: "a device free", files: map[string][]byte{"gpu0.lock": live}, gpus: "0,1", want: 0, out: "GPU 0: held"},
		{name: "every device held", files: map[string][]byte{"gpu0.lock": live, "gpu1.lock": live}, gpus: "0,1", want: 1, out: "GPU 0: held"},
		{name: "none free, one stale", files: map[string][]byte{"gpu0.lock": live, "gpu1.lock": stale}, gpus: "0,1", want: 2, out: "GPU 0: held"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, content := range tc.files {
				if content == nil {
					if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				writeLock(t, filepath.Join(dir, name), content, 0)
			}
			for _, asJSON := range []bool{false, true} {
				args := []string{"status", "--check", "--lock", lock}
				if tc.gpus != "" {
					args = append(args, "--gpus", tc.gpus)
				}
				if asJSON {
					args = append(args, "--json")
				}
				r := gx(t, nil, args...)
				wantCode(t, r, tc.want)
				if tc.want == 125 {
					if len(lines(r.stderr)) != 1 || r.stdout != "" {
						t.Errorf("an unreadable lock: stdout %q, stderr %q; want one line on stderr", r.stdout, r.stderr)
					}
					continue
				}
				if !asJSON && !strings.HasPrefix(r.stdout, tc.out) {
					t.Errorf("stdout %q, want it to begin with %q", r.stdout, tc.out)
				}
				if asJSON && !json.Valid([]byte(r.stdout)) {
					t.Errorf("status --json printed %q", r.stdout)
				}
				if r.stderr != "" {
					t.Errorf("stderr %q", r.stderr)
				}
			}
		})
	}
}

// status without --gpus on a lock whose devices' locks beside it are held
// says so, rather than a bare "free", and --check says held (1): a job of
// the lock cannot start while its GPUs are held. A job run on a device
// holds the lock beside it as a cover, which status names. A device lock
// that is not a lock is left out, and never fails status.
func TestStatusNamesDeviceLocksBeside(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	live := seedRecord(os.Getpid(), "me", "busy", "00112233aabbccdd")
	writeLock(t, filepath.Join(dir, "gpu0.lock"), live, 0)
	writeLock(t, filepath.Join(dir, "gpu1.lock"), seedRecord(testsupport.DeadPID(t), "ghost", "old", "0123456789abcdef"), 0)
	writeLock(t, filepath.Join(dir, "gpu2.lock"), []byte("not a lock record, not json"), time.Hour)
	// Written by hand: no cover.
	r := gx(t, nil, "status", "--check", "--lock", lock)
	wantCode(t, r, 1)
	want := fmt.Sprintf("free (its GPUs are held beside it: gpu0.lock by me/busy (pid %d); add --gpus 0,1 to see them)\n%s\n", os.Getpid(), readLineOf(t, lock))
	if r.stdout != want {
		t.Errorf("status printed\n%q, want\n%q\nstderr:\n%s", r.stdout, want, r.stderr)
	}
	// A job on GPU 3, by its lock's path, covers the lock beside it.
	h := startHolder(t, filepath.Join(dir, "gpu3.lock"))
	r = gx(t, nil, "status", "--check", "--lock", lock)
	wantCode(t, r, 1)
	want = fmt.Sprintf("held for the GPU locks beside it, named by %s/%s (pid %d) since ", holderOwner, holderSlug, h.p.pid())
	wantBeside := fmt.Sprintf("(its GPUs are held beside it: gpu0.lock by me/busy (pid %d), gpu3.lock by %s/%s (pid %d); add --gpus 0,1,3 to see them)\n%s\n",
		os.Getpid(), holderOwner, holderSlug, h.p.pid(), readLineOf(t, lock))
	if !strings.HasPrefix(r.stdout, want) || !strings.HasSuffix(r.stdout, wantBeside) {
		t.Errorf("status printed\n%q, want\n%q ... %q\nstderr:\n%s", r.stdout, want, wantBeside, r.stderr)
	}
	m := testsupport.StatusJSON(t, long, gpuexecBin, lock)
	list, _ := m["devicesBeside"].([]any)
	if m["state"] != "held" || m["cover"] != true || len(list) != 3 {
		t.Errorf("status --json %v: want state held, a cover, and 3 devicesBeside", m)
	}
	// With the devices named, no note: status --gpus shows them.
	r = gx(t, nil, "status", "--lock", lock, "--gpus", "0,3")
	wantCode(t, r, 0)
	if strings.Contains(r.stdout, "beside") || !strings.Contains(r.stdout, "GPU 3: held by "+holderOwner) {
		t.Errorf("status --gpus 0,3 printed %q", r.stdout)
	}
	h.release()
	wantCode(t, h.p.wait(t), 0)
}

// --version prints the version and, when the binary was built in a git
// checkout, its VCS revision from the build info.
func TestVersion(t *testing.T) {
	t.Parallel()
	bin := gpuexecBin
	// go build records the revision only in a checkout with a .git
	// folder (not in a git worktree, whose .git is a file) and where
	// -buildvcs is not false (GOFLAGS may say so): build one for this.
	checkout := false
	if fi, err := os.Stat(repoFile(".git")); err == nil && fi.IsDir() && os.Getenv("GPUEXEC_TEST_BINARY") == "" {
		if _, err := exec.LookPath("git"); err == nil {
			checkout = true
		}
	}
	if checkout {
		bin = filepath.Join(t.TempDir(), "gpuexec-vcs")
		cmd := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".")
		cmd.Dir = repoRoot()
		cmd.Env = testsupport.Env()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
		}
	}
	r := startProc(t, exec.Command(bin, "--version")).wait(t)
	wantCode(t, r, 0)
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if want := "gpuexec " + versionString("", bi) + "\n"; r.stdout != want {
		t.Errorf("--version printed %q, want %q", r.stdout, want)
	}
	if !checkout {
		t.Logf("not built in a git checkout with a .git folder: --version %q, the revision is not checked", r.stdout)
		return
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	if rev := strings.TrimSpace(string(head)); len(rev) < 12 || !strings.Contains(r.stdout, "(rev "+rev[:12]) {
		t.Errorf("--version printed %q, want the revision %.12s", r.stdout, rev)
	}
}
