//go:build unix

package lock_test

// Interoperability tests between this package and a re-creation of the seed
// article's Node render lock (testdata/seedlock.cjs). The two share one lock
// file: each must honour the other's records, staleness and release.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/testsupport"
	"github.com/gpuexec/gpuexec/lock"
)

// interopDeadline bounds every wait, generous for a loaded 2-core machine.
const interopDeadline = 20 * time.Second

// nodeEnv is the environment of the seed tool: fast polling, the article's
// stale age, and everything else inherited.
type nodeEnv map[string]string

func seedScript(t *testing.T) (node, script string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH; the seed's Node lock cannot be run")
	}
	script, err = filepath.Abs(filepath.Join("testdata", "seedlock.cjs"))
	if err != nil {
		t.Fatal(err)
	}
	return node, script
}

func nodeCmd(t *testing.T, ctx context.Context, env nodeEnv, args ...string) *exec.Cmd {
	t.Helper()
	node, script := seedScript(t)
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

// runNode runs the seed tool to completion and returns its output and exit
// status.
func runNode(t *testing.T, env nodeEnv, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), interopDeadline)
	defer cancel()
	cmd := nodeCmd(t, ctx, env, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		code = ee.ExitCode()
	default:
		t.Fatalf("node %v: %v\nstderr: %s", args, err, e.String())
	}
	return o.String(), e.String(), code
}

// line is one line of a node process's stdout, with when it was read.
type line struct {
	text string
	at   time.Time
}

// nodeProc is a running seed tool.
type nodeProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan line
	done  chan struct{}
	code  int

	mu     sync.Mutex
	stderr bytes.Buffer
	all    []line
}

type syncWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w syncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

func startNode(t *testing.T, env nodeEnv, args ...string) *nodeProc {
	t.Helper()
	p := &nodeProc{t: t, lines: make(chan line, 1024), done: make(chan struct{})}
	p.cmd = nodeCmd(t, context.Background(), env, args...)
	p.cmd.Stderr = syncWriter{&p.mu, &p.stderr}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l := line{sc.Text(), time.Now()}
			p.mu.Lock()
			p.all = append(p.all, l)
			p.mu.Unlock()
			p.lines <- l
		}
		close(p.lines)
		err := p.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
			if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
				p.code = 128 + int(st.Signal())
			}
		default:
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *nodeProc) pid() int { return p.cmd.Process.Pid }

func (p *nodeProc) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// next returns the next stdout line, failing the test at the deadline or if
// the process ends first.
func (p *nodeProc) next(what string) line {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			<-p.done
			p.t.Fatalf("node pid %d exited (status %d) before %s\nstderr: %s", p.pid(), p.code, what, p.stderrText())
		}
		return l
	case <-time.After(interopDeadline):
		p.t.Fatalf("node pid %d: no %s within %s\nstderr: %s", p.pid(), what, interopDeadline, p.stderrText())
	}
	panic("unreachable")
}

// ready waits for the "ready <pid> <token> <ms>" line and parses it.
func (p *nodeProc) ready() (token string, acquired time.Time, at time.Time) {
	p.t.Helper()
	l := p.next(`"ready" line`)
	f := strings.Fields(l.text)
	if len(f) != 4 || f[0] != "ready" || f[1] != strconv.Itoa(p.pid()) {
		p.t.Fatalf("node pid %d: want a ready line, got %q", p.pid(), l.text)
	}
	ms, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil {
		p.t.Fatal(err)
	}
	return f[2], time.UnixMilli(ms), l.at
}

// wait waits for the process to exit and returns its status.
func (p *nodeProc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(interopDeadline):
		p.t.Fatalf("node pid %d still running after %s\nstderr: %s", p.pid(), interopDeadline, p.stderrText())
	}
	panic("unreachable")
}

// eventually polls cond until it holds, failing the test at the deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testsupport.Await(t, interopDeadline, what, cond)
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func readRecord(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("lock content %q: %v", b, err)
	}
	return m
}

func newHexToken(t *testing.T) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// exitedPID returns the pid of a process that has exited and been reaped.
func exitedPID(t *testing.T) int {
	t.Helper()
	prog, err := exec.LookPath("true")
	if err != nil {
		prog = os.Args[0] // the test binary, running no tests
	}
	cmd := exec.Command(prog, "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Skipf("pid %d of an exited process is in use again (%v)", pid, err)
	}
	return pid
}

// lockLeftovers lists files beside the lock other than the lock and guard.
func lockLeftovers(t *testing.T, path string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, filepath.Base(path)+".stale-") || strings.HasPrefix(n, filepath.Base(path)+".tmp-") {
			out = append(out, n)
		}
	}
	return out
}

// inspect is lock.Inspect of the one lock at path: its status.
func inspect(path string, stale time.Duration) (*lock.Status, error) {
	r, err := lock.Inspect(lock.Options{Path: path, Stale: stale})
	if err != nil {
		return nil, err
	}
	if len(r.Locks) != 1 {
		return nil, fmt.Errorf("Inspect of one lock reported %d", len(r.Locks))
	}
	return r.Locks[0], nil
}

func goOpts(path, slug string) lock.Options {
	return lock.Options{Path: path, Owner: "gpuexec", Slug: slug, Poll: 10 * time.Millisecond}
}

// fastNode is the environment for a seed tool that polls quickly.
var fastNode = nodeEnv{"SEEDLOCK_POLL_MS": "10", "SEEDLOCK_REPORT_MS": "50"}

// TestInteropNodeWritesGoReads: a lock held by the seed's Node tool is seen,
// judged alive and respected by this package, and is free once Node exits.
func TestInteropNodeWritesGoReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	n := startNode(t, fastNode, "run", path, "channels", "ep12", "-")
	token, _, _ := n.ready()

	st, err := inspect(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != lock.StateHeld || !st.Alive || st.Info == nil {
		t.Fatalf("Inspect of a live Node lock: state %s alive %v info %v (%s)", st.State, st.Alive, st.Info, st.Reason)
	}
	if st.Info.Owner != "channels" || st.Info.Slug != "ep12" || st.Info.PID != n.pid() || st.Info.Token != token {
		t.Fatalf("Inspect: got %+v, want channels/ep12 pid %d token %s", *st.Info, n.pid(), token)
	}
	if !strings.Contains(st.Describe(), fmt.Sprintf("channels/ep12 (pid %d)", n.pid())) {
		t.Errorf("Describe = %q", st.Describe())
	}

	h, err := lock.TryAcquire(goOpts(path, "try"))
	var werr *lock.WaitError
	if !errors.Is(err, lock.ErrHeld) || !errors.As(err, &werr) || h != nil {
		t.Fatalf("TryAcquire on a live Node lock: h=%v err=%v; want a WaitError wrapping ErrHeld", h, err)
	}
	if hs := werr.Holder(); hs == nil || hs.Info == nil || hs.Info.Token != token {
		t.Fatalf("TryAcquire's WaitError names %+v, want node's token %s", hs, token)
	}
	if _, err := lock.Clear(lock.Options{Path: path}, false); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("Clear of a live Node lock without force: %v, want ErrHeld", err)
	}
	if got := readRecord(t, path)["token"]; got != token {
		t.Fatalf("lock token after refused TryAcquire/Clear = %v, want node's %s", got, token)
	}

	n.stdin.Close() // node releases and exits
	if code := n.wait(); code != 0 {
		t.Fatalf("node exited %d\nstderr: %s", code, n.stderrText())
	}
	if fileExists(path) {
		t.Fatalf("node left its lock behind: %s", readRecord(t, path))
	}
	h, err = lock.TryAcquire(goOpts(path, "after"))
	if err != nil || h == nil {
		t.Fatalf("TryAcquire after node released: h=%v err=%v", h, err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestInteropNodeSignalRelease: the seed's SIGTERM hook releases the lock,
// and a Go waiter queued behind it gets it.
func TestInteropNodeSignalRelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	n := startNode(t, fastNode, "run", path, "reels", "ep3", "-")
	n.ready()

	type res struct {
		h   *lock.Held
		err error
		at  time.Time
	}
	got := make(chan res, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), interopDeadline)
		defer cancel()
		h, err := lock.Acquire(ctx, goOpts(path, "waiter"))
		got <- res{h, err, time.Now()}
	}()
	// The waiter must still be waiting while node holds.
	select {
	case r := <-got:
		t.Fatalf("Go Acquire returned while node held the lock: %v", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	sent := time.Now()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := n.wait(); code != 143 {
		t.Fatalf("node exited %d after SIGTERM, want 143\nstderr: %s", code, n.stderrText())
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("Go Acquire after node's SIGTERM: %v", r.err)
	}
	defer r.h.Release()
	if r.at.Before(sent) {
		t.Fatalf("Go acquired at %s, before node was signalled at %s", r.at, sent)
	}
	if rec := readRecord(t, path); rec["pid"] != float64(os.Getpid()) {
		t.Fatalf("lock after Go acquired: %v", rec)
	}
}

// TestInteropGoWritesNodeReads: a lock held by this package is reported by
// the seed's status, refused by its clear, and waited for by its acquire,
// which gets the lock only after the Go side releases.
func TestInteropGoWritesNodeReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	h, err := lock.TryAcquire(goOpts(path, "ep12"))
	if err != nil || h == nil {
		t.Fatalf("TryAcquire: h=%v err=%v", h, err)
	}
	defer h.Release()
	info := h.Info()

	out, errOut, code := runNode(t, nil, "status", path)
	want := fmt.Sprintf("held by gpuexec/ep12 (pid %d)", os.Getpid())
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "alive") || strings.Contains(out, "stale") {
		t.Fatalf("node status = %q (exit %d, stderr %q), want %q and alive", out, code, errOut, want)
	}

	out, _, code = runNode(t, nil, "clear", path)
	if code == 0 || !strings.Contains(out, "refused") {
		t.Fatalf("node clear of a live Go holder: exit %d, %q; want a refusal", code, out)
	}
	if got := readRecord(t, path)["token"]; got != info.Token {
		t.Fatalf("after node clear, lock token = %v, want Go's %s", got, info.Token)
	}

	n := startNode(t, fastNode, "run", path, "channels", "ep13", "100")
	// Node has seen the Go holder and is queueing: it logs the holder.
	eventually(t, "node to log that it waits for the Go holder", func() bool {
		return strings.Contains(n.stderrText(), fmt.Sprintf("gpuexec/ep12 (pid %d)", os.Getpid()))
	})
	// Give it several more polls in which it must not get the lock.
	select {
	case l := <-n.lines:
		t.Fatalf("node printed %q while Go held the lock", l.text)
	case <-time.After(150 * time.Millisecond):
	}
	if got := readRecord(t, path)["token"]; got != info.Token {
		t.Fatalf("while node waited, lock token = %v, want Go's %s", got, info.Token)
	}

	beforeRelease := time.Now()
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	releasedBy := time.Now()
	token, acquired, seen := n.ready()
	if acquired.UnixMilli() < beforeRelease.UnixMilli() {
		t.Fatalf("node acquired at %s, before the Go side began releasing at %s", acquired.Format(time.StampMilli), beforeRelease.Format(time.StampMilli))
	}
	if seen.Before(beforeRelease) {
		t.Fatalf("node's ready line was read at %s, before Go released at %s", seen, beforeRelease)
	}
	if token == info.Token {
		t.Fatal("node reports Go's token as its own")
	}
	if code := n.wait(); code != 0 {
		t.Fatalf("node run exited %d\nstderr: %s", code, n.stderrText())
	}
	t.Logf("Go released in %s; node acquired %s after release began", releasedBy.Sub(beforeRelease), acquired.Sub(beforeRelease.Truncate(time.Millisecond)))
	if fileExists(path) {
		t.Fatalf("lock left behind: %v", readRecord(t, path))
	}
	if l := lockLeftovers(t, path); len(l) != 0 {
		t.Fatalf("leftover files: %v", l)
	}
}

// TestInteropNodeIgnoresGoExtraFields: a Go record carries host, pidStart
// and childPgid; the seed's Node tool ignores them and treats the live
// holder as alive: status says alive, clear refuses, run times out.
func TestInteropNodeIgnoresGoExtraFields(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	h, err := lock.TryAcquire(goOpts(path, "extra"))
	if err != nil || h == nil {
		t.Fatalf("TryAcquire: h=%v err=%v", h, err)
	}
	defer h.Release()
	if err := h.RecordChild(syscall.Getpgrp()); err != nil {
		t.Fatal(err)
	}
	rec := readRecord(t, path)
	for _, k := range []string{"pid", "acquiredAt", "owner", "slug", "token", "host", "pidStart", "childPgid"} {
		if _, ok := rec[k]; !ok {
			t.Fatalf("Go record %v lacks %q; the test needs gpuexec's extra fields", rec, k)
		}
	}

	out, _, code := runNode(t, nil, "status", path)
	if code != 0 || !strings.Contains(out, "alive") || strings.Contains(out, "stale") {
		t.Fatalf("node status of a live Go holder with extra fields = %q (exit %d)", out, code)
	}
	out, _, code = runNode(t, nil, "clear", path)
	if code == 0 || !strings.Contains(out, "refused") {
		t.Fatalf("node clear: exit %d %q, want refused", code, out)
	}
	env := nodeEnv{"SEEDLOCK_POLL_MS": "20", "SEEDLOCK_MAX_WAIT_MS": "300"}
	out, errOut, code := runNode(t, env, "run", path, "channels", "ep14", "10")
	if code != 75 || strings.Contains(out, "ready") {
		t.Fatalf("node run against a live Go holder: exit %d, stdout %q, stderr %q; want exit 75 without the lock", code, out, errOut)
	}
	if got := readRecord(t, path)["token"]; got != h.Info().Token {
		t.Fatalf("lock token = %v, want Go's %s", got, h.Info().Token)
	}
	select {
	case <-h.Lost():
		t.Fatalf("Go holder lost its lock: %v", h.LostReason())
	default:
	}
}

// TestInteropHeartbeat: each side's heartbeat keeps the other from judging
// a long hold stale, when the other's stale age is shorter than the hold.
func TestInteropHeartbeat(t *testing.T) {
	t.Run("NodeHeartbeatSeenByGo", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gpu.lock")
		n := startNode(t, nodeEnv{"SEEDLOCK_HEARTBEAT_MS": "50"}, "run", path, "channels", "long", "-")
		n.ready()
		fi0, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		// Backdate the lock: only node's heartbeat can make it fresh again.
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
		eventually(t, "node's heartbeat to touch the lock", func() bool {
			fi, err := os.Stat(path)
			return err == nil && !fi.ModTime().Before(fi0.ModTime())
		})
		st, err := inspect(path, time.Minute)
		if err != nil || st.State != lock.StateHeld {
			t.Fatalf("Inspect after node's heartbeat: %v %v", st, err)
		}
		n.stdin.Close()
		if code := n.wait(); code != 0 {
			t.Fatalf("node exited %d", code)
		}
	})
	t.Run("GoHeartbeatSeenByNode", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gpu.lock")
		o := goOpts(path, "long")
		o.Heartbeat, o.Stale = 50*time.Millisecond, time.Hour
		h, err := lock.TryAcquire(o)
		if err != nil || h == nil {
			t.Fatalf("TryAcquire: %v %v", h, err)
		}
		defer h.Release()
		// A node waiter whose stale age is 2 s, waiting 5 s: only Go's
		// heartbeat (50 ms, forty times within the stale age, however
		// loaded the machine) keeps it from clearing the lock.
		env := nodeEnv{"SEEDLOCK_POLL_MS": "20", "SEEDLOCK_STALE_MS": "2000", "SEEDLOCK_MAX_WAIT_MS": "5000"}
		out, errOut, code := runNode(t, env, "run", path, "channels", "ep15", "10")
		if code != 75 || strings.Contains(out, "ready") {
			t.Fatalf("node run: exit %d stdout %q stderr %q; want 75 without the lock", code, out, errOut)
		}
		if got := readRecord(t, path)["token"]; got != h.Info().Token {
			t.Fatalf("lock token = %v, want Go's", got)
		}
	})
}

// TestInteropNodeForceClearGoHolder: `clear --force` from the seed removes a
// live Go holder's lock; the Go holder notices at its next heartbeat and its
// Release leaves the next holder's lock alone.
func TestInteropNodeForceClearGoHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	o := goOpts(path, "victim")
	o.Heartbeat = 20 * time.Millisecond
	h, err := lock.TryAcquire(o)
	if err != nil || h == nil {
		t.Fatalf("TryAcquire: %v %v", h, err)
	}
	defer h.Release()
	out, _, code := runNode(t, nil, "clear", path, "--force")
	if code != 0 || !strings.Contains(out, "cleared") {
		t.Fatalf("node clear --force: exit %d %q", code, out)
	}
	select {
	case <-h.Lost():
	case <-time.After(interopDeadline):
		t.Fatal("Go holder did not notice that node force-cleared its lock")
	}
	n := startNode(t, fastNode, "run", path, "channels", "next", "-")
	token, _, _ := n.ready()
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if got := readRecord(t, path)["token"]; got != token {
		t.Fatalf("after the lost Go holder released, lock token = %v, want node's %s", got, token)
	}
	n.stdin.Close()
	if code := n.wait(); code != 0 {
		t.Fatalf("node exited %d", code)
	}
}

// TestInteropStale: each side clears the other's lock when its holder is
// gone, or when its heartbeat is too old.
func TestInteropStale(t *testing.T) {
	t.Run("NodeClearsDeadGoLock", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gpu.lock")
		host, _ := os.Hostname()
		dead := exitedPID(t)
		rec := fmt.Sprintf(`{"pid":%d,"acquiredAt":%q,"owner":"gpuexec","slug":"dead","token":%q,"host":%q,"pidStart":%d}`,
			dead, time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), newHexToken(t), host, time.Now().UnixMilli()-1000)
		if err := os.WriteFile(path, []byte(rec), 0o666); err != nil {
			t.Fatal(err)
		}
		if st, err := inspect(path, 0); err != nil || st.State != lock.StateStale {
			t.Fatalf("Go's own judgement of the hand-written dead lock: %v %v", st, err)
		}
		out, _, _ := runNode(t, nil, "status", path)
		if !strings.Contains(out, "stale") {
			t.Fatalf("node status of a dead Go lock = %q", out)
		}
		out, errOut, code := runNode(t, fastNode, "run", path, "channels", "ep16", "10")
		if code != 0 || !strings.Contains(out, "ready") {
			t.Fatalf("node run over a dead Go lock: exit %d stdout %q stderr %q", code, out, errOut)
		}
		if !strings.Contains(errOut, fmt.Sprintf("pid %d", dead)) {
			t.Errorf("node did not log clearing the dead lock: %q", errOut)
		}
		if fileExists(path) {
			t.Fatalf("lock left behind: %v", readRecord(t, path))
		}
		if l := lockLeftovers(t, path); len(l) != 0 {
			t.Fatalf("leftover files: %v", l)
		}
	})
	t.Run("NodeClearsGoLockWithOldHeartbeat", func(t *testing.T) {
		// A live pid (this process) but an mtime past the article's 90
		// minutes: stale by heartbeat, whatever acquiredAt says.
		path := filepath.Join(t.TempDir(), "gpu.lock")
		host, _ := os.Hostname()
		rec := fmt.Sprintf(`{"pid":%d,"acquiredAt":%q,"owner":"gpuexec","slug":"hung","token":%q,"host":%q}`,
			os.Getpid(), time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), newHexToken(t), host)
		if err := os.WriteFile(path, []byte(rec), 0o666); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-91 * time.Minute)
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := runNode(t, fastNode, "run", path, "channels", "ep17", "10")
		if code != 0 || !strings.Contains(out, "ready") || !strings.Contains(errOut, "沒心跳") {
			t.Fatalf("node run over a Go lock without heartbeat: exit %d stdout %q stderr %q", code, out, errOut)
		}
	})
	t.Run("NodeKeepsOldAcquiredAtWithFreshHeartbeat", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gpu.lock")
		rec := fmt.Sprintf(`{"pid":%d,"acquiredAt":"2020-01-01T00:00:00.000Z","owner":"gpuexec","slug":"old","token":%q}`,
			os.Getpid(), newHexToken(t))
		if err := os.WriteFile(path, []byte(rec), 0o666); err != nil {
			t.Fatal(err)
		}
		out, _, _ := runNode(t, nil, "status", path)
		if !strings.Contains(out, "alive") {
			t.Fatalf("node status = %q, want alive (staleness is by mtime)", out)
		}
		if st, err := inspect(path, 0); err != nil || st.State != lock.StateHeld {
			t.Fatalf("Inspect = %v %v, want held", st, err)
		}
	})
	t.Run("GoClearsKilledNodeLock", func(t *testing.T) {
		// The article's taskkill /F case: the holder is killed without
		// running its exit hook; the next waiter clears by "pid gone".
		path := filepath.Join(t.TempDir(), "gpu.lock")
		n := startNode(t, nil, "run", path, "reels", "killed", "-")
		token, _, _ := n.ready()
		if err := n.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		n.wait()
		rec := readRecord(t, path)
		if rec["token"] != token || rec["pid"] != float64(n.pid()) {
			t.Fatalf("killed node's lock = %v", rec)
		}
		var logBuf bytes.Buffer
		var logMu sync.Mutex
		o := goOpts(path, "after-kill")
		o.Logger = hclog.New(&hclog.LoggerOptions{Output: syncWriter{&logMu, &logBuf}, Level: hclog.Info})
		ctx, cancel := context.WithTimeout(context.Background(), interopDeadline)
		defer cancel()
		h, err := lock.Acquire(ctx, o)
		if err != nil {
			t.Fatalf("Go Acquire over a killed node's lock: %v", err)
		}
		defer h.Release()
		if got := readRecord(t, path); got["pid"] != float64(os.Getpid()) {
			t.Fatalf("lock after Acquire = %v", got)
		}
		logMu.Lock()
		logged := logBuf.String()
		logMu.Unlock()
		if !strings.Contains(logged, "cleared stale GPU lock") || !strings.Contains(logged, fmt.Sprintf("pid %d is gone", n.pid())) {
			t.Errorf("Go did not log clearing the stale node lock:\n%s", logged)
		}
		if l := lockLeftovers(t, path); len(l) != 0 {
			t.Fatalf("leftover files: %v", l)
		}
	})
	t.Run("GoClearsHandWrittenDeadNodeLock", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gpu.lock")
		dead := exitedPID(t)
		rec := fmt.Sprintf(`{"pid":%d,"acquiredAt":%q,"owner":"reels","slug":"ep3","token":%q}`,
			dead, time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), newHexToken(t))
		if err := os.WriteFile(path, []byte(rec), 0o666); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), interopDeadline)
		defer cancel()
		h, err := lock.Acquire(ctx, goOpts(path, "after-dead"))
		if err != nil {
			t.Fatalf("Go Acquire over a dead node lock: %v", err)
		}
		if err := h.Release(); err != nil {
			t.Fatal(err)
		}
		if fileExists(path) {
			t.Fatal("lock left behind")
		}
	})
}

// TestInteropMixedContention: three seed Node contenders and three Go
// contenders take turns on one lock. Every critical section creates a shared
// "inside" marker with O_CREAT|O_EXCL on entry (holding the contender's
// identity) and removes it on exit after checking it still holds that
// identity; failure to create, or a marker that changed, is an overlap. Go
// sections also take a non-blocking exclusive flock on a separate truth file,
// which the kernel refuses to two sections at once.
func TestInteropMixedContention(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpu.lock")
	inside := filepath.Join(dir, "inside")
	truth := filepath.Join(dir, "truth")
	const (
		contenders = 3
		rounds     = 4
	)
	start := time.Now()

	var nodes []*nodeProc
	for i := range contenders {
		env := nodeEnv{
			"SEEDLOCK_POLL_MS": strconv.Itoa(5 + 2*i),
			"SEEDLOCK_RUNS":    strconv.Itoa(rounds),
			"SEEDLOCK_GAP_MS":  "5",
		}
		nodes = append(nodes, startNode(t, env, "run", path, "node", fmt.Sprintf("n%d", i), strconv.Itoa(20+15*i), inside))
	}

	var overlaps atomic.Int64
	var goDone atomic.Int64
	errs := make(chan error, contenders*rounds)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), interopDeadline)
	defer cancel()
	for i := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := lock.Options{Path: path, Owner: "go", Slug: fmt.Sprintf("g%d", i), Poll: time.Duration(5+2*i) * time.Millisecond}
			hold := time.Duration(20+15*i) * time.Millisecond
			for r := range rounds {
				h, err := lock.Acquire(ctx, o)
				if err != nil {
					errs <- fmt.Errorf("go %d round %d: %w", i, r, err)
					return
				}
				func() {
					defer func() {
						if err := h.Release(); err != nil {
							errs <- fmt.Errorf("go %d round %d: release: %w", i, r, err)
						}
					}()
					tf, err := os.OpenFile(truth, os.O_RDWR|os.O_CREATE, 0o666)
					if err != nil {
						errs <- err
						return
					}
					defer tf.Close()
					if err := syscall.Flock(int(tf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
						overlaps.Add(1)
						errs <- fmt.Errorf("go %d round %d: truth flock: %w (another Go section is inside)", i, r, err)
						return
					}
					defer syscall.Flock(int(tf.Fd()), syscall.LOCK_UN)
					me := fmt.Sprintf("go %d %s", i, h.Info().Token)
					mf, err := os.OpenFile(inside, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
					if err != nil {
						other, _ := os.ReadFile(inside)
						overlaps.Add(1)
						errs <- fmt.Errorf("go %d round %d: entering: %v: inside is %q", i, r, err, other)
						return
					}
					_, werr := mf.WriteString(me)
					if err := errors.Join(werr, mf.Close()); err != nil {
						errs <- err
						return
					}
					time.Sleep(hold)
					if got, _ := os.ReadFile(inside); string(got) != me {
						overlaps.Add(1)
						errs <- fmt.Errorf("go %d round %d: leaving: inside is %q, want %q", i, r, got, me)
						return
					}
					if err := os.Remove(inside); err != nil {
						errs <- err
						return
					}
					goDone.Add(1)
				}()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	nodeDone := 0
	for i, n := range nodes {
		code := n.wait()
		n.mu.Lock()
		for _, l := range n.all {
			switch {
			case strings.HasPrefix(l.text, "released "):
				nodeDone++
			case strings.HasPrefix(l.text, "overlap"):
				overlaps.Add(1)
				t.Errorf("node %d: %s", i, l.text)
			}
		}
		n.mu.Unlock()
		if code != 0 {
			t.Errorf("node %d (pid %d) exited %d\nstderr: %s", i, n.pid(), code, n.stderrText())
		}
	}
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping critical sections", overlaps.Load())
	}
	if int(goDone.Load()) != contenders*rounds || nodeDone != contenders*rounds {
		t.Fatalf("completed sections: go %d, node %d; want %d each", goDone.Load(), nodeDone, contenders*rounds)
	}
	if fileExists(path) || fileExists(inside) {
		t.Fatalf("left behind: lock %v, inside marker %v", fileExists(path), fileExists(inside))
	}
	if l := lockLeftovers(t, path); len(l) != 0 {
		t.Fatalf("leftover files: %v", l)
	}
	t.Logf("%d sections (%d go, %d node) in %s", goDone.Load()+int64(nodeDone), goDone.Load(), nodeDone, time.Since(start).Round(time.Millisecond))
}

// TestInteropNodeWaitsForSharers: while sharers (Options.ShareMiB) hold a
// device together, the lock file is one seed record the Node tool reads as
// a live holder: it waits while any sharer runs, also after the sharer its
// record named has left, and takes the lock once the last one leaves.
func TestInteropNodeWaitsForSharers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	share := func(slug string) *lock.Held {
		o := goOpts(path, slug)
		o.ShareMiB = 4096
		h, err := lock.TryAcquire(o)
		if err != nil {
			t.Fatalf("sharer %s: %v", slug, err)
		}
		return h
	}
	a, b := share("a"), share("b")
	out, _, code := runNode(t, nil, "status", path)
	if code != 0 || !strings.Contains(out, "alive") {
		t.Fatalf("node status of a shared lock = %q (exit %d)", out, code)
	}
	n := startNode(t, fastNode, "run", path, "channels", "ep13", "100")
	eventually(t, "node to log that it waits for the sharers", func() bool {
		return strings.Contains(n.stderrText(), fmt.Sprintf("(pid %d)", os.Getpid()))
	})
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-n.lines:
		t.Fatalf("node printed %q while a sharer still held the lock", l.text)
	case <-time.After(300 * time.Millisecond):
	}
	if rec := readRecord(t, path); rec["share"] != true {
		t.Fatalf("record while one sharer is left: %v", rec)
	}
	before := time.Now()
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	_, acquired, _ := n.ready()
	if acquired.UnixMilli() < before.UnixMilli() {
		t.Fatalf("node acquired at %s, before the last sharer left at %s", acquired.Format(time.StampMilli), before.Format(time.StampMilli))
	}
	if code := n.wait(); code != 0 {
		t.Fatalf("node run exited %d\nstderr: %s", code, n.stderrText())
	}
	if l := lockLeftovers(t, path); len(l) != 0 {
		t.Fatalf("leftover files: %v", l)
	}
}
