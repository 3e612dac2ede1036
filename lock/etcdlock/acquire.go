package etcdlock

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/gpuexec/gpuexec/lock"
)

// Acquire queues for the lock and returns it held (a *Held), or, once ctx
// ends, a *lock.WaitError with the holder as last seen. Waiters are served
// in arrival order. While it waits it logs the holder and this waiter's
// position every Options.Report. etcd going away does not end the wait: a
// waiter whose place is lost (its lease expired meanwhile) queues again at
// the back, and other etcd errors are retried, with at most a second
// between tries; each is logged once per Options.Report at most. Only
// options that Check refuses, and an etcd that cannot be reached at the
// start (an error wrapping lock.ErrUnreachable), fail at once.
func (b Backend) Acquire(ctx context.Context, o lock.Options) (lock.Locker, error) {
	o = withDefaults(o)
	c, err := dial(o)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var seen *lock.Status
	var nextLost, nextErr time.Time
	pause := firstRetry
	for {
		tried := time.Now()
		if c == nil {
			// The last client was closed: a ticket lost, or given up
			// while etcd did not answer.
			c, err = dial(o)
		}
		if c != nil {
			var h *Held
			if h, err = b.waitInQueue(ctx, c, o, start, &seen); err == nil {
				return h, nil
			}
			if c.isClosed() {
				c = nil
			}
		}
		if ctx.Err() != nil {
			if c != nil {
				// Who is in the way now, not at the last report.
				if st := holderNow(c); st != nil {
					seen = st
				}
				c.close()
			}
			return nil, &lock.WaitError{Seen: []*lock.Status{seen}, Waited: time.Since(start), Err: ctx.Err()}
		}
		now := time.Now()
		if errors.Is(err, errTicketLost) || errors.Is(err, concurrency.ErrSessionExpired) {
			// A new client too: the old one's streams may hang on a
			// member that does not answer.
			if c != nil {
				c.close()
				c = nil
			}
			if !now.Before(nextLost) {
				o.Logger.Warn("this waiter's place in the etcd queue was lost (its lease expired while etcd was away?); queueing again at the back", "path", o.Path)
				nextLost = now.Add(o.Report)
			}
		} else if !now.Before(nextErr) {
			// etcd away while waiting: keep trying until ctx ends.
			o.Logger.Warn("etcd error while waiting for the GPU lock; still trying", "path", o.Path, "error", err)
			nextErr = now.Add(o.Report)
		}
		if now.Sub(tried) > retryPause {
			// That try was long: no hurry to slow down.
			pause = firstRetry
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		pause = min(2*pause, retryPause)
	}
}

// waitInQueue is one ticket in the queue, from joining to holding (or an
// error).
func (b Backend) waitInQueue(ctx context.Context, c *conn, o lock.Options, start time.Time, seen **lock.Status) (*Held, error) {
	tk, err := b.join(ctx, c, o)
	if err != nil {
		return nil, err
	}
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	locked := make(chan error, 1)
	go func() { locked <- tk.m.Lock(lctx) }()

	// giveUp ends the wait: the Mutex deletes its key unless etcd is away;
	// then the client is closed to unblock it, and the lease expires by
	// itself.
	giveUp := func() {
		lcancel()
		t := time.NewTimer(cancelWait)
		defer t.Stop()
		select {
		case <-locked:
			tk.leave()
		case <-t.C:
			tk.k.stop()
			c.close()
			<-locked
		}
	}
	report := time.NewTimer(0)
	defer report.Stop()
	for {
		select {
		case err := <-locked:
			if err != nil {
				tk.leave()
				return nil, err
			}
			h, err := tk.hold(o, start)
			if err != nil {
				tk.leave()
			}
			return h, err
		case <-tk.k.gone:
			giveUp()
			return nil, errTicketLost
		case <-ctx.Done():
			giveUp()
			return nil, ctx.Err()
		case <-report.C:
			if line, st := tk.waitingLine(ctx, start); line != "" {
				// A queue that could not be read (the deadline
				// near) leaves the holder last seen as it was.
				if st != nil {
					*seen = st
				}
				o.Logger.Info(line, "path", o.Path)
			}
			report.Reset(o.Report)
		}
	}
}

// waitingLine lists the queue and words the waiting line with the holder
// and this waiter's position, for a waiter that began at start; "" when
// this waiter is first (it is taking the lock).
func (tk *ticket) waitingLine(ctx context.Context, start time.Time) (string, *lock.Status) {
	w := lock.Waiting{Waited: time.Since(start)}
	w.Until, _ = ctx.Deadline()
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	kvs, err := list(ctx, tk.c)
	if err != nil {
		return "waiting for GPU lock: cannot read the queue from etcd (" + err.Error() + "); waited " + fmtAge(w.Waited) + ", still waiting", nil
	}
	pos := -1
	for i, kv := range kvs {
		if string(kv.Key) == tk.key {
			pos = i
		}
	}
	if len(kvs) == 0 || pos == 0 {
		return "", nil
	}
	st := keyStatus(tk.c, kvs[0])
	if pos < 0 {
		pos = len(kvs) // our key is not visible yet
	}
	// The first key is the holder's: the waiters are the others.
	w.Position, w.Of = pos, max(len(kvs)-1, pos)
	return st.WaitingLine(w), st
}

// TryAcquire takes the lock if nobody holds it or waits for it, and
// returns it held (a *Held). Otherwise it returns a *lock.WaitError
// wrapping lock.ErrHeld, with the holder as seen then; it never queues.
func (b Backend) TryAcquire(o lock.Options) (lock.Locker, error) {
	o = withDefaults(o)
	c, err := dial(o)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), c.u.DialTimeout+callWait)
	defer cancel()
	tk, err := b.join(ctx, c, o)
	if err != nil {
		c.close()
		return nil, err
	}
	switch err := tk.m.TryLock(ctx); {
	case errors.Is(err, concurrency.ErrLocked):
		tk.leave()
		seen := holderNow(c)
		c.close()
		return nil, &lock.WaitError{Seen: []*lock.Status{seen}, Err: lock.ErrHeld}
	case err != nil:
		tk.leave()
		c.close()
		return nil, err
	}
	h, err := tk.hold(o, start)
	if err != nil {
		tk.leave()
		c.close()
		return nil, err
	}
	return h, nil
}
