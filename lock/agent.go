package lock

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
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/proc"
)

// Etcd is the backend of etcd:// locks (see ParseEtcdURL). By default it
// runs the helper program gpuexec-etcd (AgentName) and talks to it over a
// pipe: the etcd client (gRPC, protobuf) is linked into that helper only, so
// that programs which use lock files alone — gpuexec among them — do not pay
// for its start-up. A Go program that links package etcdlock anyway may set
// Etcd to etcdlock.Backend{} to do the same in-process.
var Etcd Backend = agentBackend{}

// AgentName is the helper program that holds etcd locks for the Etcd
// backend. It is looked for in $GPUEXEC_ETCD_AGENT (a path), beside the
// running executable, then on PATH.
const AgentName = "gpuexec-etcd"

// AgentEnv names the environment variable that points at the helper.
const AgentEnv = "GPUEXEC_ETCD_AGENT"

// Bounds on the helper's answers. A helper that does not answer in time is
// killed; an etcd lease it held then expires by itself within its TTL.
const (
	agentCallWait   = 15 * time.Second // RecordChild, Release
	agentCancelWait = 10 * time.Second // a cancelled Acquire
	agentExitWait   = 5 * time.Second  // the helper's exit after its last answer
)

// agentRequest is one line from the user of a lock to the helper.
type agentRequest struct {
	// Op is acquire, try, inspect or clear (the first line); cancel (while
	// acquiring); child or release (while holding).
	Op     string        `json:"op"`
	Path   string        `json:"path,omitempty"`
	Owner  string        `json:"owner,omitempty"`
	Slug   string        `json:"slug,omitempty"`
	Report time.Duration `json:"report,omitempty"`
	Stale  time.Duration `json:"stale,omitempty"`
	Force  bool          `json:"force,omitempty"`
	PGID   int           `json:"pgid,omitempty"`
	// Level is the lowest log level the user wants forwarded.
	Level string `json:"level,omitempty"`
}

// agentEvent is one line from the helper.
type agentEvent struct {
	// Event is log, lost (any time); acquired, busy, waited, status,
	// error (answers to the first line); ok, released (answers to child
	// and release).
	Event  string        `json:"event"`
	Level  string        `json:"level,omitempty"`
	Msg    string        `json:"msg,omitempty"`
	Args   []any         `json:"args,omitempty"`
	Info   *Info         `json:"info,omitempty"`
	Status *Status       `json:"status,omitempty"`
	Error  string        `json:"error,omitempty"`
	Kind   string        `json:"kind,omitempty"` // invalid, unreachable, held
	Waited time.Duration `json:"waited,omitempty"`
}

// Error kinds carried by agentEvent.Kind, so that errors.Is works across
// the pipe.
func errKind(err error) string {
	switch {
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.Is(err, ErrUnreachable):
		return "unreachable"
	case errors.Is(err, ErrHeld):
		return "held"
	}
	return ""
}

// agentError is an error reported by the helper, wrapping the sentinel of
// its kind.
type agentError struct {
	msg  string
	kind error
}

func (e *agentError) Error() string { return e.msg }
func (e *agentError) Unwrap() error { return e.kind }

func kindError(msg, kind string) error {
	var k error
	switch kind {
	case "invalid":
		k = ErrInvalid
	case "unreachable":
		k = ErrUnreachable
	case "held":
		k = ErrHeld
	}
	return &agentError{msg: msg, kind: k}
}

// ----- the user's side -----

type agentBackend struct{}

// agentConn is a running helper: requests go to its stdin, events come
// from its stdout.
type agentConn struct {
	log hclog.Logger

	mu     sync.Mutex // serializes writes
	w      io.WriteCloser
	events chan agentEvent
	done   chan struct{} // closed when the helper's output ends
	rerr   error         // why it ended, once done is closed

	onLost func(reason string) // set once the lock is held
	lostMu sync.Mutex

	wait func() error // reaps the helper
	kill func()
}

// startAgent starts a helper; a variable so that tests can serve the
// protocol in-process.
var startAgent = startAgentProcess

// agentPath finds the helper program.
func agentPath() (string, error) {
	if p := os.Getenv(AgentEnv); p != "" {
		return p, nil
	}
	name := AgentName
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(AgentName); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("lock: etcd:// locks need the helper program %s beside %s or on PATH "+
		"(go install github.com/gpuexec/gpuexec/cmd/gpuexec-etcd@latest), or its path in %s", AgentName, filepath.Base(os.Args[0]), AgentEnv)
}

func startAgentProcess(log hclog.Logger) (*agentConn, error) {
	path, err := agentPath()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path)
	cmd.Stderr = os.Stderr
	agentProcAttr(cmd)
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	r, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("lock: starting %s: %w", path, err)
	}
	c := newAgentConn(log, w, r)
	c.wait = cmd.Wait
	c.kill = func() { cmd.Process.Kill() }
	return c, nil
}

func newAgentConn(log hclog.Logger, w io.WriteCloser, r io.Reader) *agentConn {
	c := &agentConn{log: nullLogger(log), w: w, events: make(chan agentEvent, 8), done: make(chan struct{})}
	go c.read(r)
	return c
}

func (c *agentConn) read(r io.Reader) {
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var ev agentEvent
		if err := dec.Decode(&ev); err != nil {
			c.rerr = err
			close(c.done)
			c.lostMu.Lock()
			on := c.onLost
			c.lostMu.Unlock()
			if on != nil {
				on("the " + AgentName + " helper that held the lock exited (" + err.Error() + ")")
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

func (c *agentConn) send(req agentRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = c.w.Write(append(b, '\n'))
	return err
}

// next is the helper's next answer, within limit (0: no limit).
func (c *agentConn) next(limit time.Duration) (agentEvent, error) {
	var timeout <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		timeout = t.C
	}
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
		return agentEvent{}, c.gone()
	case <-timeout:
		return agentEvent{}, fmt.Errorf("lock: the %s helper did not answer within %s", AgentName, limit)
	}
}

func (c *agentConn) gone() error {
	return fmt.Errorf("lock: the %s helper exited unexpectedly (%v)", AgentName, c.rerr)
}

// close ends the helper: EOF on its stdin, then it exits; killed if it does
// not within agentExitWait.
func (c *agentConn) close() {
	c.w.Close()
	t := time.NewTimer(agentExitWait)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		if c.kill != nil {
			c.kill()
		}
		<-c.done
	}
	if c.wait != nil {
		c.wait()
	}
}

func request(op string, o Options) agentRequest {
	level := "info"
	if o.Logger != nil {
		level = o.Logger.GetLevel().String()
	}
	return agentRequest{Op: op, Path: o.Path, Owner: o.Owner, Slug: o.Slug, Report: o.Report, Stale: o.Stale, Level: level}
}

// checkRemote validates o for the helper, so that bad paths fail without
// starting it.
func checkRemote(o Options) error {
	if o.Path == "" {
		return fmt.Errorf("%w: empty lock path", ErrInvalid)
	}
	_, err := ParseEtcdURL(o.Path)
	return err
}

func (agentBackend) Acquire(ctx context.Context, o Options) (Locker, error) {
	if err := checkRemote(o); err != nil {
		return nil, err
	}
	start := time.Now()
	c, err := startAgent(o.Logger)
	if err != nil {
		return nil, err
	}
	if err := c.send(request("acquire", o)); err != nil {
		c.close()
		return nil, fmt.Errorf("lock: talking to the %s helper: %w", AgentName, err)
	}
	var ev agentEvent
	select {
	case ev = <-c.events:
	case <-c.done:
		if ev, err = c.next(0); err != nil {
			c.close()
			return nil, err
		}
	case <-ctx.Done():
		c.send(agentRequest{Op: "cancel"})
		ev, err = c.next(agentCancelWait)
		if err != nil {
			c.close()
			return nil, &WaitError{Waited: time.Since(start), Err: ctx.Err()}
		}
	}
	switch ev.Event {
	case "acquired":
		h := newAgentHeld(c, o, ev.Info)
		if ctx.Err() != nil {
			// Got it just as the caller gave up.
			h.Release()
			return nil, &WaitError{Waited: time.Since(start), Err: ctx.Err()}
		}
		return h, nil
	case "waited":
		c.close()
		err := ctx.Err()
		if err == nil {
			err = context.Canceled
		}
		return nil, &WaitError{Holder: ev.Status, Waited: ev.Waited, Err: err}
	default:
		c.close()
		return nil, answerError(ev)
	}
}

func answerError(ev agentEvent) error {
	if ev.Event == "error" {
		return kindError(ev.Error, ev.Kind)
	}
	return fmt.Errorf("lock: unexpected answer %q from the %s helper", ev.Event, AgentName)
}

func (agentBackend) TryAcquire(o Options) (Locker, bool, error) {
	if err := checkRemote(o); err != nil {
		return nil, false, err
	}
	c, err := startAgent(o.Logger)
	if err != nil {
		return nil, false, err
	}
	if err := c.send(request("try", o)); err != nil {
		c.close()
		return nil, false, err
	}
	ev, err := c.next(0)
	switch {
	case err != nil:
		c.close()
		return nil, false, err
	case ev.Event == "acquired":
		return newAgentHeld(c, o, ev.Info), true, nil
	case ev.Event == "busy":
		c.close()
		return nil, false, nil
	default:
		c.close()
		return nil, false, answerError(ev)
	}
}

// once runs a one-answer request (inspect, clear).
func (agentBackend) once(req agentRequest, log hclog.Logger) (*Status, error) {
	c, err := startAgent(log)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := c.send(req); err != nil {
		return nil, err
	}
	ev, err := c.next(0)
	switch {
	case err != nil:
		return nil, err
	case ev.Event == "status" && ev.Error != "":
		return ev.Status, kindError(ev.Error, ev.Kind)
	case ev.Event == "status":
		return ev.Status, nil
	default:
		return nil, answerError(ev)
	}
}

func (b agentBackend) Inspect(o Options) (*Status, error) {
	if err := checkRemote(o); err != nil {
		return nil, err
	}
	return b.once(request("inspect", o), o.Logger)
}

func (b agentBackend) Clear(o Options, force bool) (*Status, error) {
	if err := checkRemote(o); err != nil {
		return nil, err
	}
	req := request("clear", o)
	req.Force = force
	return b.once(req, o.Logger)
}

// agentHeld is a lock held by a helper on our behalf.
type agentHeld struct {
	c    *agentConn
	path string
	info Info
	log  hclog.Logger

	mu       sync.Mutex
	released bool
	*LostSignal
}

func newAgentHeld(c *agentConn, o Options, info *Info) *agentHeld {
	h := &agentHeld{c: c, path: o.Path, log: nullLogger(o.Logger), LostSignal: NewLostSignal()}
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

func (h *agentHeld) markLost(reason string) {
	h.mu.Lock()
	released := h.released
	h.mu.Unlock()
	if released {
		return
	}
	h.MarkLost(errors.New(reason), func() {
		select {
		case <-h.c.done:
			// The helper could not say so itself.
			h.log.Error("GPU lock lost", "path", h.path, "reason", reason)
		default:
		}
	})
}

func (h *agentHeld) Path() string { return h.path }

func (h *agentHeld) Info() Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.info
}

func (h *agentHeld) RecordChild(pgid int) error {
	if err := h.c.send(agentRequest{Op: "child", PGID: pgid}); err != nil {
		return err
	}
	ev, err := h.c.next(agentCallWait)
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

func (h *agentHeld) Release() error {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return nil
	}
	h.released = true
	h.mu.Unlock()
	defer h.c.close()
	if err := h.c.send(agentRequest{Op: "release"}); err != nil {
		return fmt.Errorf("lock: release: the %s helper is gone; the lock frees itself when its lease expires: %w", AgentName, err)
	}
	ev, err := h.c.next(agentCallWait)
	switch {
	case err != nil:
		return fmt.Errorf("lock: release: %w", err)
	case ev.Event != "released":
		return answerError(ev)
	case ev.Error != "":
		return errors.New(ev.Error)
	}
	return nil
}

// ----- the helper's side -----

// ServeAgent is the helper program's main loop (see AgentName): it reads
// one request from in, does it with b and answers on out; a held lock is
// held until the user releases it or in reaches EOF (the user died: the lock
// is released once the job's process group, if one was recorded, is gone).
// It returns the helper's exit status.
func ServeAgent(in io.Reader, out io.Writer, b Backend) int {
	s := &server{enc: json.NewEncoder(out)}
	dec := json.NewDecoder(bufio.NewReader(in))
	var req agentRequest
	if err := dec.Decode(&req); err != nil {
		if !errors.Is(err, io.EOF) {
			s.send(agentEvent{Event: "error", Error: "lock: bad request: " + err.Error(), Kind: "invalid"})
		}
		return 2
	}
	level := hclog.LevelFromString(req.Level)
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	log := hclog.NewInterceptLogger(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	log.RegisterSink(&logSink{s: s, level: level})
	o := Options{Path: req.Path, Owner: req.Owner, Slug: req.Slug, Report: req.Report, Stale: req.Stale, Logger: log}

	// Later requests; closed at EOF.
	reqs := make(chan agentRequest)
	go func() {
		defer close(reqs)
		for {
			var r agentRequest
			if err := dec.Decode(&r); err != nil {
				return
			}
			reqs <- r
		}
	}()

	switch req.Op {
	case "inspect", "clear":
		var st *Status
		var err error
		if req.Op == "inspect" {
			st, err = b.Inspect(o)
		} else {
			st, err = b.Clear(o, req.Force)
		}
		if err != nil && st == nil {
			s.fail(err)
			return 1
		}
		ev := agentEvent{Event: "status", Status: st}
		if err != nil {
			ev.Error, ev.Kind = err.Error(), errKind(err)
		}
		s.send(ev)
		return 0
	case "try":
		h, ok, err := b.TryAcquire(o)
		switch {
		case err != nil:
			s.fail(err)
			return 1
		case !ok:
			s.send(agentEvent{Event: "busy"})
			return 0
		}
		return s.hold(h, reqs, log)
	case "acquire":
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type result struct {
			h   Locker
			err error
		}
		got := make(chan result, 1)
		go func() {
			h, err := b.Acquire(ctx, o)
			got <- result{h, err}
		}()
		in := reqs
		for {
			select {
			case r, ok := <-in:
				if !ok || r.Op == "cancel" {
					cancel()
					in = nil
				}
				continue
			case r := <-got:
				var werr *WaitError
				switch {
				case r.err == nil && ctx.Err() != nil:
					r.h.Release()
					s.send(agentEvent{Event: "waited"})
					return 0
				case r.err == nil:
					return s.hold(r.h, reqs, log)
				case errors.As(r.err, &werr):
					s.send(agentEvent{Event: "waited", Status: werr.Holder, Waited: werr.Waited})
					return 0
				default:
					s.fail(r.err)
					return 1
				}
			}
		}
	default:
		s.send(agentEvent{Event: "error", Error: fmt.Sprintf("lock: unknown request %q", req.Op), Kind: "invalid"})
		return 2
	}
}

// groupPoll is how often a helper whose user died checks whether the job's
// process group is gone.
const groupPoll = 100 * time.Millisecond

func (s *server) hold(h Locker, reqs <-chan agentRequest, log hclog.Logger) int {
	info := h.Info()
	s.send(agentEvent{Event: "acquired", Info: &info})
	lost := h.Lost()
	pgid := 0
	for {
		select {
		case <-lost:
			lost = nil
			s.send(agentEvent{Event: "lost", Error: fmt.Sprint(h.LostReason())})
		case r, ok := <-reqs:
			if !ok {
				// The user is gone without releasing: keep the lock
				// while its job runs, as a lock file would.
				if pgid > 0 && proc.GroupAlive(pgid) {
					log.Warn("the process holding the GPU lock is gone; keeping the lock until its job's process group ends", "pgid", pgid)
					t := time.NewTicker(groupPoll)
					for proc.GroupAlive(pgid) && !isClosed(h.Lost()) {
						<-t.C
					}
					t.Stop()
				}
				if err := h.Release(); err != nil {
					log.Error("could not release the GPU lock", "error", err)
				}
				return 0
			}
			switch r.Op {
			case "child":
				if err := h.RecordChild(r.PGID); err != nil {
					s.fail(err)
				} else {
					pgid = r.PGID
					s.send(agentEvent{Event: "ok"})
				}
			case "release":
				ev := agentEvent{Event: "released"}
				if err := h.Release(); err != nil {
					ev.Error = err.Error()
				}
				s.send(ev)
				return 0
			}
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

type server struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (s *server) send(ev agentEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enc.Encode(ev); err != nil {
		// The user is gone; nothing to tell.
		return
	}
}

func (s *server) fail(err error) {
	s.send(agentEvent{Event: "error", Error: err.Error(), Kind: errKind(err)})
}

// logSink forwards log lines to the user.
type logSink struct {
	s     *server
	level hclog.Level
}

func (l *logSink) Accept(_ string, level hclog.Level, msg string, args ...any) {
	if level < l.level {
		return
	}
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case nil, string, bool, int, int64, uint64, float64:
			out[i] = v
		case error:
			out[i] = v.Error()
		case fmt.Stringer:
			out[i] = v.String()
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	l.s.send(agentEvent{Event: "log", Level: level.String(), Msg: msg, Args: out})
}
