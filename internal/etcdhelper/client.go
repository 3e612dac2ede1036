package etcdhelper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpuexec/gpuexec/internal/etcdoptions"
	"github.com/gpuexec/gpuexec/internal/etcdurl"
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

var _ lock.Leased = Backend{}

// Check reports what is wrong with o for an etcd lock, touching nothing
// (and starting no helper).
func (Backend) Check(o lock.Options) error {
	_, err := etcdoptions.Check(o)
	return err
}

// LeaseTTL is the time to live of the lease that holds the lock o names:
// the URL's ttl=, or its default; false when o.Path is no etcd:// URL
// (Check says why).
func (Backend) LeaseTTL(o lock.Options) (time.Duration, bool) { return etcdoptions.LeaseTTL(o) }

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
