package etcdhelper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/lock"
)

// Serve is the helper program's main loop: it reads the hello and one
// request from in, does it with b and answers on out; a held lock is held
// until the user releases it or in reaches EOF. At EOF without a release
// (the user died) the lock is kept while the liveness pipe is open or a
// process of the job's process group (noted or recorded) lives, and
// released once neither is so, or at once when the lock is lost. live opens
// the liveness pipe of a hold request that says the user passed one
// (InheritedLive in the helper program); without a pipe the lock is kept
// for the job's group alone. A hello of another protocol, or a request
// without a hello (a gpuexec from before protocol 2), is refused with one
// error line. It returns the helper's exit status.
//
// gpuexec starts the helper with a parent-death signal (Linux): the helper
// dies with a gpuexec killed outright, so that one that stops answering is
// not left behind. A hold request clears it before anything else (a lock
// may have to be kept for the job, or a place in the queue given back,
// after gpuexec is gone; from then on the helper watches its input and the
// liveness pipe itself): so Serve must run on the program's main thread,
// the one the signal belongs to (runtime.LockOSThread in an init function
// of the program's main package). Status and clear keep it.
func Serve(in io.Reader, out io.Writer, b lock.Backend, live func() (io.ReadCloser, error)) int {
	s := &server{enc: json.NewEncoder(out)}
	dec := json.NewDecoder(bufio.NewReader(in))
	var hello request
	if err := dec.Decode(&hello); err != nil {
		if !errors.Is(err, io.EOF) {
			s.send(event{Event: "error", Error: "lock: bad request: " + err.Error(), Kind: "invalid"})
		}
		return 2
	}
	switch {
	case hello.Op != "hello":
		s.send(event{Event: "error", Kind: "version", Error: mismatch(
			fmt.Sprintf("gpuexec speaks an older protocol: it sent %q without a hello", hello.Op),
			fmt.Sprintf("%s speaks protocol %d", Name, Protocol)).Error()})
		return 2
	case hello.Protocol != Protocol:
		s.send(event{Event: "error", Kind: "version", Error: mismatch(
			fmt.Sprintf("gpuexec speaks protocol %d", hello.Protocol),
			fmt.Sprintf("%s speaks protocol %d", Name, Protocol)).Error()})
		return 2
	}
	s.send(event{Event: "hello", Protocol: Protocol})
	var req request
	if err := dec.Decode(&req); err != nil {
		if !errors.Is(err, io.EOF) {
			s.send(event{Event: "error", Error: "lock: bad request: " + err.Error(), Kind: "invalid"})
		}
		return 2
	}
	if req.Op == "hold" {
		outliveUser()
	}
	level := hclog.LevelFromString(req.Level)
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	log := hclog.NewInterceptLogger(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	log.RegisterSink(&logSink{s: s, level: level})
	o := lock.Options{Path: req.Path, Owner: req.Owner, Slug: req.Slug, Report: req.Report, Stale: req.Stale,
		Heartbeat: req.Heartbeat, Poll: req.Poll, HoldLimit: req.HoldLimit, Logger: log}

	// Later requests; closed at EOF.
	reqs := make(chan request)
	go func() {
		defer close(reqs)
		for {
			var r request
			if err := dec.Decode(&r); err != nil {
				return
			}
			reqs <- r
		}
	}()

	// hup is closed when the liveness pipe hangs up: at once without one.
	hup := make(chan struct{})
	switch {
	case req.Op == "hold" && req.Live:
		if live == nil {
			s.send(event{Event: "error", Error: "lock: this helper cannot take a liveness pipe", Kind: "invalid"})
			return 2
		}
		r, err := live()
		if err != nil {
			s.fail(err)
			return 1
		}
		defer r.Close()
		go watchHangUp(r, hup)
	default:
		close(hup)
	}

	switch {
	case req.Op == "status":
		r, err := b.Inspect(o)
		if err != nil {
			s.fail(err)
			return 1
		}
		s.send(event{Event: "report", Report: toWireReport(r)})
		return 0
	case req.Op == "clear":
		st, err := b.Clear(o, req.Force)
		if err != nil && st == nil {
			s.fail(err)
			return 1
		}
		ev := event{Event: "cleared", Status: toWireStatus(st)}
		if err != nil {
			ev.Error, ev.Kind = err.Error(), errKind(err)
		}
		s.send(ev)
		return 0
	case req.Op == "hold" && !req.Wait:
		h, err := b.TryAcquire(o)
		var busy *lock.WaitError
		switch {
		case errors.As(err, &busy) && errors.Is(err, lock.ErrHeld):
			s.send(event{Event: "busy", Seen: toWireStatuses(busy.Seen)})
			return 0
		case err != nil:
			s.fail(err)
			return 1
		}
		return s.hold(h, reqs, hup, log)
	case req.Op == "hold":
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type result struct {
			h   lock.Locker
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
				var werr *lock.WaitError
				switch {
				case r.err == nil && ctx.Err() != nil:
					r.h.Release()
					s.send(event{Event: "waited"})
					return 0
				case r.err == nil:
					return s.hold(r.h, reqs, hup, log)
				case errors.As(r.err, &werr):
					s.send(event{Event: "waited", Seen: toWireStatuses(werr.Seen), Waited: werr.Waited})
					return 0
				default:
					s.fail(r.err)
					return 1
				}
			}
		}
	default:
		s.send(event{Event: "error", Error: fmt.Sprintf("lock: unknown request %q", req.Op), Kind: "invalid"})
		return 2
	}
}

// groupPoll is how often a helper whose user died checks whether the job's
// process group is gone.
const groupPoll = 100 * time.Millisecond

// watchHangUp reads the liveness pipe r until it hangs up (every write end
// closed: the user and its job's processes that kept it are gone) or
// fails, then closes hup. What a job writes into it is read and dropped.
func watchHangUp(r io.Reader, hup chan<- struct{}) {
	defer close(hup)
	buf := make([]byte, 512)
	for {
		if _, err := r.Read(buf); err != nil {
			return
		}
	}
}

func (s *server) hold(h lock.Locker, reqs <-chan request, hup <-chan struct{}, log hclog.Logger) int {
	info := h.Info()
	s.send(event{Event: "held", Info: toWireInfo(&info)})
	lost := h.Lost()
	pgid := 0
	// note remembers the job's group here, whatever etcd says: it is
	// what keeps the lock if the user dies.
	note := func(r request) {
		if r.PGID > 1 {
			pgid = r.PGID
		} else {
			log.Debug("ignoring a process group that is no job's", "op", r.Op, "pgid", r.PGID)
		}
	}
	for {
		select {
		case <-lost:
			lost = nil
			s.send(event{Event: "lost", Error: fmt.Sprint(h.LostReason())})
		case r, ok := <-reqs:
			if !ok {
				// The user is gone without releasing: keep the lock
				// while its job runs, as a lock file would.
				keepWhileTheJobRuns(h, hup, pgid, log)
				if err := h.Release(); err != nil {
					log.Error("could not release the GPU lock", "error", err)
				}
				return 0
			}
			switch r.Op {
			case "note":
				note(r)
			case "child":
				note(r)
				if err := h.RecordChild(r.PGID); err != nil {
					s.fail(err)
				} else {
					s.send(event{Event: "ok"})
				}
			case "release":
				ev := event{Event: "released"}
				if err := h.Release(); err != nil {
					ev.Error = err.Error()
				}
				s.send(ev)
				return 0
			}
		}
	}
}

// keepWhileTheJobRuns returns once the job of a user that died is gone:
// the liveness pipe hung up and no process of the group pgid (0: none
// known) lives, checked every groupPoll; or at once when the lock is lost.
func keepWhileTheJobRuns(h lock.Locker, hup <-chan struct{}, pgid int, log hclog.Logger) {
	groupAlive := func() bool { return pgid > 0 && proc.GroupAlive(pgid) }
	if isClosed(h.Lost()) || isClosed(hup) && !groupAlive() {
		return
	}
	log.Warn("the process holding the GPU lock is gone; keeping the lock until its job's processes are gone", "pgid", pgid)
	t := time.NewTicker(groupPoll)
	defer t.Stop()
	for {
		select {
		case <-h.Lost():
			return
		case <-hup:
			hup = nil // hung up: the group alone from now on
			if !groupAlive() {
				return
			}
		case <-t.C:
			if (hup == nil || isClosed(hup)) && !groupAlive() {
				return
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

func (s *server) send(ev event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enc.Encode(ev); err != nil {
		// The user is gone; nothing to tell.
		return
	}
}

func (s *server) fail(err error) {
	s.send(event{Event: "error", Error: err.Error(), Kind: errKind(err)})
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
	l.s.send(event{Event: "log", Level: level.String(), Msg: msg, Args: out})
}
