package etcdhelper

import (
	"bufio"
	"context"
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

	"github.com/gpuexec/gpuexec/internal/etcdoptions"
	"github.com/gpuexec/gpuexec/internal/etcdurl"
	"github.com/gpuexec/gpuexec/internal/lost"
	"github.com/gpuexec/gpuexec/lock"
)

// Bounds on the helper's answers: every one has one. A helper that does not
// answer in time is killed (with what it started in its process group) and
// reaped; an etcd lease it held then expires by itself within its TTL. Only
// the answer to a queued Acquire, the lock itself, is waited for as long as
// the caller's context lets it.
const (
	helloWait  = 10 * time.Second // the hello: the helper says it before it touches etcd
	callWait   = 15 * time.Second // RecordChild, Release
	cancelWait = 10 * time.Second // a cancelled Acquire
	exitWait   = 5 * time.Second  // the helper's exit after its last answer
	// drainWait bounds the wait for the end of the output of a helper
	// that exited: whatever it left behind may hold that output open.
	drainWait = time.Second
)

// onceWait bounds the one answer to a status, clear or try request: the
// helper's own bounds on reaching etcd (the URL's dial-timeout, at most
// three times over) and on its calls there, with room to spare.
func onceWait(o lock.Options) time.Duration {
	d := etcdurl.DefaultDialTimeout
	if u, err := etcdurl.Parse(o.Path); err == nil {
		d = u.DialTimeout
	}
	return 3*d + 10*time.Second
}

// Backend is the lock.Backend of etcd:// locks that runs the helper
// program (Name) for each operation and talks to it over a pipe.
type Backend struct{}

var _ lock.Backend = Backend{}

// For is the backend of the lock at path: Backend for an etcd:// URL,
// lock.Files for anything else.
func For(path string) lock.Backend {
	if etcdurl.Is(path) {
		return Backend{}
	}
	return lock.Files
}

// Check reports what is wrong with o for an etcd lock, touching nothing
// (and starting no helper).
func (Backend) Check(o lock.Options) error {
	_, err := etcdoptions.Check(o)
	return err
}

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

// open checks o, starts a helper and sends the hello and the request,
// then reads the helper's hello: a helper of another protocol is refused
// (and ended) before it does anything. It waits helloWait at most for the
// hello, whatever the caller's wait (a helper says it in its first
// milliseconds, before it touches etcd): a helper that has not said it by
// then is killed.
func open(op string, o lock.Options, edit func(*request)) (*conn, error) {
	if _, err := etcdoptions.Check(o); err != nil {
		return nil, err
	}
	c, err := start(o.Logger, op == "hold")
	if err != nil {
		return nil, err
	}
	level := "info"
	if o.Logger != nil {
		level = o.Logger.GetLevel().String()
	}
	req := request{Op: op, Path: o.Path, Owner: o.Owner, Slug: o.Slug, Report: o.Report, Stale: o.Stale,
		Heartbeat: o.Heartbeat, Poll: o.Poll, HoldLimit: o.HoldLimit, Level: level, Live: c.live != nil}
	if edit != nil {
		edit(&req)
	}
	// Both lines at once: a helper of an older protocol takes the hello
	// for its request and refuses it, and never reads the second.
	// (An old helper may have exited before the second line: its answer
	// says why.)
	serr := errors.Join(c.send(request{Op: "hello", Protocol: Protocol}), c.send(req))
	ev, err := c.next(helloWait)
	switch {
	case errors.As(err, new(*lateError)):
		return nil, c.late(err, "hello")
	case err != nil && serr != nil:
		c.close()
		return nil, fmt.Errorf("lock: talking to the %s helper: %w", Name, serr)
	case err != nil:
		c.close()
		return nil, err
	case ev.Event == "hello" && ev.Protocol == Protocol && serr != nil:
		c.close()
		return nil, fmt.Errorf("lock: talking to the %s helper: %w", Name, serr)
	case ev.Event == "hello" && ev.Protocol == Protocol:
		return c, nil
	case ev.Event == "hello":
		c.close()
		return nil, mismatch(fmt.Sprintf("gpuexec speaks protocol %d", Protocol), fmt.Sprintf("the helper %d", ev.Protocol))
	case ev.Event == "error" && ev.Kind == "version":
		c.close()
		return nil, kindError(ev.Error, "invalid")
	default:
		// A helper from before protocol 2 answers the hello with an
		// unknown-request error.
		c.close()
		return nil, mismatch(fmt.Sprintf("gpuexec speaks protocol %d", Protocol), fmt.Sprintf("the helper an older one: it answered %q", ev.Error))
	}
}

func answerError(ev event) error {
	if ev.Event == "error" {
		return kindError(ev.Error, ev.Kind)
	}
	return fmt.Errorf("lock: unexpected answer %q from the %s helper", ev.Event, Name)
}

// Acquire queues for the lock through a helper.
func (Backend) Acquire(ctx context.Context, o lock.Options) (lock.Locker, error) {
	begin := time.Now()
	c, err := open("hold", o, func(r *request) { r.Wait = true })
	if err != nil {
		return nil, err
	}
	var ev event
	select {
	case ev = <-c.events:
	case <-c.done:
		if ev, err = c.next(0); err != nil {
			c.close()
			return nil, err
		}
	case <-c.exited:
		// next reads what it said, drainWait at most.
		if ev, err = c.next(0); err != nil {
			c.close()
			return nil, err
		}
	case <-ctx.Done():
		c.send(request{Op: "cancel"})
		ev, err = c.next(cancelWait)
		switch {
		case errors.As(err, new(*lateError)):
			return nil, c.late(err, "answer to its cancel")
		case err != nil:
			c.close()
			return nil, &lock.WaitError{Waited: time.Since(begin), Err: ctx.Err()}
		}
	}
	switch ev.Event {
	case "held":
		h := newHeld(c, o, ev.Info.lock())
		if ctx.Err() != nil {
			// Got it just as the caller gave up.
			h.Release()
			return nil, &lock.WaitError{Waited: time.Since(begin), Err: ctx.Err()}
		}
		return h, nil
	case "waited":
		c.close()
		err := ctx.Err()
		if err == nil {
			err = context.Canceled
		}
		return nil, &lock.WaitError{Seen: lockStatuses(ev.Seen), Waited: ev.Waited, Err: err}
	default:
		c.close()
		return nil, answerError(ev)
	}
}

// TryAcquire takes the lock through a helper if it is free and nobody is
// queued; contention is a *lock.WaitError wrapping lock.ErrHeld.
func (Backend) TryAcquire(o lock.Options) (lock.Locker, error) {
	c, err := open("hold", o, nil)
	if err != nil {
		return nil, err
	}
	ev, err := c.next(onceWait(o))
	switch {
	case errors.As(err, new(*lateError)):
		return nil, c.late(err, "answer to its try")
	case err != nil:
		c.close()
		return nil, err
	case ev.Event == "held":
		return newHeld(c, o, ev.Info.lock()), nil
	case ev.Event == "busy":
		c.close()
		return nil, &lock.WaitError{Seen: lockStatuses(ev.Seen), Err: lock.ErrHeld}
	default:
		c.close()
		return nil, answerError(ev)
	}
}

// once runs a request of one answer (status, clear) in a helper of its
// own, onceWait at most.
func once(op string, o lock.Options, edit func(*request)) (event, error) {
	c, err := open(op, o, edit)
	if err != nil {
		return event{}, err
	}
	ev, err := c.next(onceWait(o))
	if errors.As(err, new(*lateError)) {
		return event{}, c.late(err, "answer to its "+op)
	}
	c.close()
	return ev, err
}

// Inspect reads the lock and its queue through a helper.
func (Backend) Inspect(o lock.Options) (*lock.Report, error) {
	ev, err := once("status", o, nil)
	switch {
	case err != nil:
		return nil, err
	case ev.Event == "report" && ev.Report != nil:
		return ev.Report.lock(), nil
	default:
		return nil, answerError(ev)
	}
}

// Clear clears the lock through a helper.
func (Backend) Clear(o lock.Options, force bool) (*lock.Status, error) {
	ev, err := once("clear", o, func(r *request) { r.Force = force })
	switch {
	case err != nil:
		return nil, err
	case ev.Event == "cleared" && ev.Error != "":
		return ev.Status.lock(), kindError(ev.Error, ev.Kind)
	case ev.Event == "cleared":
		return ev.Status.lock(), nil
	default:
		return nil, answerError(ev)
	}
}

// held is a lock held by a helper on our behalf.
type held struct {
	c    *conn
	path string
	info lock.Info
	log  hclog.Logger

	mu       sync.Mutex // guards info
	released atomic.Bool
	lost     *lost.Signal
}

func newHeld(c *conn, o lock.Options, info *lock.Info) *held {
	h := &held{c: c, path: o.Path, log: o.Logger, lost: lost.New()}
	if h.log == nil {
		h.log = hclog.NewNullLogger()
	}
	if info != nil {
		h.info = *info
	}
	c.lostMu.Lock()
	c.onLost = h.markLost
	c.lostMu.Unlock()
	select {
	case <-c.done: // the helper is already gone
		h.markLost(c.gone().Error())
	default:
	}
	return h
}

func (h *held) markLost(reason string) {
	if h.released.Load() {
		return
	}
	h.lost.Mark(errors.New(reason), func() {
		select {
		case <-h.c.done:
			// The helper could not say so itself.
			h.log.Error("GPU lock lost", "path", h.path, "reason", reason)
		default:
		}
	})
}

func (h *held) Path() string          { return h.path }
func (h *held) Lost() <-chan struct{} { return h.lost.Lost() }
func (h *held) LostReason() error     { return h.lost.Reason() }

func (h *held) Info() lock.Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.info
}

// NoteChild tells the helper the job's process group, pgid, the moment the
// job is started: a helper whose user dies without releasing keeps the lock
// while a process of that group lives. It waits for no answer (the request
// is in the helper's input once NoteChild returns) and writes nothing to
// etcd; RecordChild puts the group into the record, for status.
func (h *held) NoteChild(pgid int) error {
	return h.c.send(request{Op: "note", PGID: pgid})
}

// LiveFiles is the write end of the helper's liveness pipe, for the job to
// inherit (exec.Cmd.ExtraFiles on Unix): a helper whose user dies without
// releasing keeps the lock while any process holds it open. None where
// the OS has no liveness pipe (Windows). Do not close it; Release does.
func (h *held) LiveFiles() []*os.File {
	if h.c.live == nil {
		return nil
	}
	return []*os.File{h.c.live}
}

func (h *held) RecordChild(pgid int) error {
	if err := h.c.send(request{Op: "child", PGID: pgid}); err != nil {
		return err
	}
	ev, err := h.c.next(callWait)
	switch {
	case err != nil:
		return err
	case ev.Event == "ok":
		h.mu.Lock()
		h.info.ChildPGID = pgid
		h.mu.Unlock()
		return nil
	default:
		return answerError(ev)
	}
}

func (h *held) Release() error {
	if !h.released.CompareAndSwap(false, true) {
		return nil
	}
	defer h.c.close()
	if err := h.c.send(request{Op: "release"}); err != nil {
		return fmt.Errorf("lock: release: the %s helper is gone; the lock frees itself when its lease expires: %w", Name, err)
	}
	ev, err := h.c.next(callWait)
	switch {
	case errors.As(err, new(*lateError)):
		return fmt.Errorf("lock: release: %w; the lock frees itself when its lease expires", h.c.late(err, "answer to its release"))
	case err != nil:
		return fmt.Errorf("lock: release: %w", err)
	case ev.Event != "released":
		return answerError(ev)
	case ev.Error != "":
		return errors.New(ev.Error)
	}
	return nil
}
