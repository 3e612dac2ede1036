package etcdhelper

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// conn is a running helper: requests go to its stdin, events come from its
// stdout.
type conn struct {
	log hclog.Logger

	mu     sync.Mutex // serializes writes
	w      io.WriteCloser
	events chan event
	done   chan struct{} // closed when the helper's output ends
	rerr   error         // why it ended, once done is closed

	onLost func(reason string) // set once the lock is held
	lostMu sync.Mutex

	// live is the write end of the helper's liveness pipe (see package
	// etcdhelper), which the job inherits; nil without one.
	live *os.File

	// name is the helper, as errors name it.
	name string
	// exited is closed once the helper has exited and been reaped.
	exited <-chan struct{}
	// kill kills the helper (and what it started) unless it has been
	// reaped.
	kill func()
	// stopReading ends the read of the helper's output (then done is
	// closed): for output that something the helper left holds open.
	stopReading func()
}

// start starts a helper, with a liveness pipe when live is set (where the
// OS has one: see livePipe); a variable so that tests can serve the
// protocol in-process.
var start = startProcess

// helperPath finds the helper program.
func helperPath() (string, error) {
	if p := os.Getenv(Env); p != "" {
		return p, nil
	}
	name := Name
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(Name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("lock: etcd:// locks need the helper program %s beside %s or on PATH "+
		"(go install github.com/gpuexec/gpuexec/cmd/gpuexec-etcd@latest), or its path in %s", Name, filepath.Base(os.Args[0]), Env)
}

// startProcess starts the helper program in a process group of its own,
// tied to gpuexec where the OS can (procAttr, startTied): a helper that
// stops answering dies with a gpuexec killed while it waits.
func startProcess(log hclog.Logger, live bool) (*conn, error) {
	path, err := helperPath()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path)
	cmd.Stderr = os.Stderr
	procAttr(cmd)
	var opened []*os.File // closed on failure
	fail := func(err error) (*conn, error) {
		for _, f := range opened {
			f.Close()
		}
		return nil, err
	}
	var liveR, liveW *os.File
	if live {
		if liveR, liveW, err = livePipe(cmd); err != nil {
			return nil, fmt.Errorf("lock: the %s helper's liveness pipe: %w", Name, err)
		}
		if liveR != nil {
			opened = append(opened, liveR, liveW)
		}
	}
	// Its input and output are pipes of our own, not cmd's: cmd.Wait,
	// which reaps the helper as soon as it exits, must not close its
	// output before its last answer is read.
	inR, w, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	opened = append(opened, inR, w)
	r, outW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	opened = append(opened, r, outW)
	cmd.Stdin, cmd.Stdout = inR, outW
	untie, err := startTied(cmd)
	if err != nil {
		return fail(fmt.Errorf("lock: starting %s: %w", path, err))
	}
	// The helper's ends.
	inR.Close()
	outW.Close()
	if liveR != nil {
		liveR.Close()
	}
	exited := make(chan struct{})
	var reaped atomic.Bool
	go func() {
		cmd.Wait()
		reaped.Store(true)
		untie()
		close(exited)
	}()
	c := newConn(log, w, r)
	c.live = liveW
	c.name = path
	c.exited = exited
	c.kill = func() {
		if !reaped.Load() { // else its pid may be another's by now
			killHelper(cmd.Process)
		}
	}
	c.stopReading = func() { r.Close() }
	return c, nil
}

func newConn(log hclog.Logger, w io.WriteCloser, r io.Reader) *conn {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	c := &conn{log: log, w: w, events: make(chan event, 8), done: make(chan struct{})}
	go c.read(r)
	return c
}

func (c *conn) read(r io.Reader) {
	dec := json.NewDecoder(&lineCap{r: bufio.NewReader(r)})
	for {
		var ev event
		if err := dec.Decode(&ev); err != nil {
			c.rerr = err
			close(c.done)
			c.lostMu.Lock()
			on := c.onLost
			c.lostMu.Unlock()
			if on != nil {
				on("the " + Name + " helper that held the lock exited (" + err.Error() + ")")
			}
			return
		}
		switch ev.Event {
		case "log":
			level := hclog.LevelFromString(ev.Level)
			if level == hclog.NoLevel {
				level = hclog.Info
			}
			c.log.Log(level, ev.Msg, ev.Args...)
		case "lost":
			c.lostMu.Lock()
			on := c.onLost
			c.lostMu.Unlock()
			if on != nil {
				on(ev.Error)
			}
		default:
			select {
			case c.events <- ev:
			default:
				c.log.Debug("unexpected answer from the etcd helper", "event", ev.Event)
			}
		}
	}
}

// maxLine caps a line from the helper: its longest answer, a report of
// the lock and its queue, is far shorter.
const maxLine = 4 << 20

// lineCap reads from r and fails once a line is longer than maxLine, so
// that a helper's endless line is not kept whole.
type lineCap struct {
	r    io.Reader
	line int // bytes since the last newline
}

func (l *lineCap) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for i, b := range p[:n] {
		if b == '\n' {
			l.line = 0
			continue
		}
		if l.line++; l.line > maxLine {
			return i, fmt.Errorf("it wrote a line longer than %d MiB", maxLine>>20)
		}
	}
	return n, err
}

func (c *conn) send(req request) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = c.w.Write(append(b, '\n'))
	return err
}

// next is the helper's next answer, within limit (0: no limit; a
// *lateError when it misses it).
func (c *conn) next(limit time.Duration) (event, error) {
	var timeout <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		timeout = t.C
	}
	exited := c.exited
	for {
		select {
		case ev := <-c.events:
			return ev, nil
		case <-c.done:
			// An answer may have come just before the end.
			select {
			case ev := <-c.events:
				return ev, nil
			default:
			}
			return event{}, c.gone()
		case <-exited:
			// Its output ends with it, unless something it left
			// holds it open: what it wrote is read, and no more.
			exited = nil
			go c.drain()
		case <-timeout:
			return event{}, &lateError{helper: c.name, limit: limit}
		}
	}
}

// lateError is a helper that missed its bound on an answer.
type lateError struct {
	helper string
	what   string // the answer it did not give: "hello", "answer to its status"; "" for "answer"
	limit  time.Duration
	killed bool // see conn.late
}

func (e *lateError) Error() string {
	what, end := e.what, ""
	if what == "" {
		what = "answer"
	}
	if e.killed {
		end = "; killed it"
	}
	return fmt.Sprintf("lock: the %s helper %s gave no %s within %s%s", Name, e.helper, what, e.limit, end)
}

// gone says why the helper's answers ended, once done is closed.
func (c *conn) gone() error {
	why := fmt.Sprint(c.rerr)
	switch {
	case errors.Is(c.rerr, io.EOF), errors.Is(c.rerr, os.ErrClosed):
		why = "it exited"
	case errors.As(c.rerr, new(*json.SyntaxError)):
		why = "it wrote something else than its protocol: " + why
	}
	return fmt.Errorf("lock: no answer from the %s helper %s: %s", Name, c.name, why)
}

// late ends a helper that missed its bound on what (see lateError) at
// once: killed and reaped, not given exitWait. It returns the error saying
// so.
func (c *conn) late(err error, what string) error {
	var le *lateError
	if errors.As(err, &le) {
		le.what, le.killed = what, true
	}
	c.end(0)
	return err
}

// close ends the helper: EOF on its stdin (and the liveness pipe closed on
// this side), then it exits; killed if it does not within exitWait.
func (c *conn) close() { c.end(exitWait) }

// end closes the helper's input and the liveness pipe on this side, waits
// at most limit for the helper to exit, kills it if it has not, and reaps
// it; then its output is read to its end, for drainWait at most.
func (c *conn) end(limit time.Duration) {
	if c.live != nil {
		c.live.Close()
	}
	c.w.Close()
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		select {
		case <-c.exited:
		case <-t.C:
		}
	}
	c.kill()
	<-c.exited
	c.drain()
	<-c.done
}

// drain lets the reader take what the exited helper's output still holds,
// for drainWait at most, then stops it (a process the helper left behind
// may hold that output open).
func (c *conn) drain() {
	t := time.NewTimer(drainWait)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.stopReading()
	}
}
