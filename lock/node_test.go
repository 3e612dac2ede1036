//go:build unix

package lock_test

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
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
	"github.com/gpuexec/gpuexec/lock"
)

// Running the re-created Node tool (testdata/seedlock.cjs) for the
// interoperability tests of interop_test.go.

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
