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
// until the user releases it or in reaches EOF (the user died: the lock is
// released once the job's process group, if one was recorded, is gone). A
// hello of another protocol, or a request without a hello (a gpuexec from
// before protocol 2), is refused with one error line. It returns the
// helper's exit status.
func Serve(in io.Reader, out io.Writer, b lock.Backend) int {
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

	switch {
	case req.Op == "status":
		r, err := b.Inspect(o)
		if err != nil {
			s.fail(err)
			return 1
		}
		s.send(event{Event: "report", Report: r})
		return 0
	case req.Op == "clear":
		st, err := b.Clear(o, req.Force)
		if err != nil && st == nil {
			s.fail(err)
			return 1
		}
		ev := event{Event: "cleared", Status: st}
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
			s.send(event{Event: "busy", Seen: busy.Seen})
			return 0
		case err != nil:
			s.fail(err)
			return 1
		}
		return s.hold(h, reqs, log)
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
					return s.hold(r.h, reqs, log)
				case errors.As(r.err, &werr):
					s.send(event{Event: "waited", Seen: werr.Seen, Waited: werr.Waited})
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

func (s *server) hold(h lock.Locker, reqs <-chan request, log hclog.Logger) int {
	info := h.Info()
	s.send(event{Event: "held", Info: &info})
	lost := h.Lost()
	pgid := 0
	for {
		select {
		case <-lost:
			lost = nil
			s.send(event{Event: "lost", Error: fmt.Sprint(h.LostReason())})
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
