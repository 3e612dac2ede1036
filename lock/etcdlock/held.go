package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gpuexec/gpuexec/internal/lost"
	"github.com/gpuexec/gpuexec/lock"
)

// Held is a held etcd lock. Until Release is called or Lost is closed, no
// other holder has the lock; after Lost is closed, none has it for at
// least another third of the TTL. Its methods are safe for concurrent use.
type Held struct {
	tk *ticket
	o  lock.Options

	mu       sync.Mutex // guards tk.rec
	released atomic.Bool

	lost *lost.Signal // see Lost
	stop chan struct{}
	done chan struct{}
}

var _ lock.Locker = (*Held)(nil)

// Path is the lock's URL, Options.Path.
func (h *Held) Path() string { return h.o.Path }

// Key is the holder's key in etcd, under the lock's own prefix KEY#/.
func (h *Held) Key() string { return h.tk.key }

// Info is the holder's record as last written: with the job's process
// group once RecordChild succeeded.
func (h *Held) Info() lock.Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tk.rec.Info
}

// Lost is closed when the lock may no longer be ours: etcd says the lease
// is gone, the key was deleted, or two thirds of the TTL have passed since
// the last renewal etcd confirmed was sent. It is closed at least a third
// of the TTL before etcd can let the lease expire and give the lock to the
// next waiter, so that the job can be stopped first.
func (h *Held) Lost() <-chan struct{} { return h.lost.Lost() }

// LostReason says why Lost was closed; nil while it is not.
func (h *Held) LostReason() error { return h.lost.Reason() }

// markLost logs the loss, then closes Lost with why, once.
func (h *Held) markLost(why error) {
	h.lost.Mark(why, func() { h.o.Logger.Error("GPU lock lost", "path", h.o.Path, "reason", why) })
}

// watchLoss watches the lease's renewals and the key until Release, closing
// ready once it watches.
func (h *Held) watchLoss(ready chan<- struct{}) {
	defer close(h.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cli, k := h.tk.c.cli, h.tk.k
	wch := cli.Watch(ctx, h.tk.key, clientv3.WithRev(h.tk.rev+1), clientv3.WithFilterPut())
	close(ready)
	deadline := time.NewTimer(time.Until(k.safeUntil()))
	defer deadline.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-k.gone:
			h.markLost(errors.New("etcd says the lock's lease is gone: it expired or was revoked"))
			return
		case <-k.renewed:
			deadline.Reset(time.Until(k.safeUntil()))
		case <-deadline.C:
			if stop := k.safeUntil(); time.Now().Before(stop) {
				deadline.Reset(time.Until(stop)) // renewed meanwhile
				continue
			}
			sent, grant := k.confirmed()
			h.markLost(fmt.Errorf("etcd has not confirmed a renewal of the lock's lease sent in the last %s (TTL %s): it may expire a third of the TTL from now and another job take the lock",
				fmtAge(time.Since(sent)), grant))
			return
		case wr, ok := <-wch:
			if !ok {
				return // ctx cancelled: stopping
			}
			if err := wr.Err(); err != nil {
				// Compacted past our revision, or cancelled by the
				// server: look at the key, then watch again.
				gctx, gcancel := context.WithTimeout(ctx, callWait)
				resp, gerr := cli.Get(gctx, h.tk.key)
				gcancel()
				if gerr == nil && (len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != h.tk.rev) {
					h.markLost(errors.New("the lock's key in etcd is gone"))
					return
				}
				rev := int64(0)
				if gerr == nil {
					rev = resp.Header.Revision + 1
				}
				wch = cli.Watch(ctx, h.tk.key, clientv3.WithRev(rev), clientv3.WithFilterPut())
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					h.markLost(errors.New("the lock's key in etcd was deleted (gpuexec clear --force?)"))
					return
				}
			}
		}
	}
}

// RecordChild writes the job's process group into the holder's record
// (childPgid, which status shows) if the key is still ours; an error says
// it was not written. It returns within 5 seconds, and as soon as the lock
// is lost: whoever waits for it (the helper, before it passes the loss on)
// must not wait for an etcd that does not answer.
func (h *Held) RecordChild(pgid int) error {
	h.mu.Lock()
	rec := h.tk.rec
	h.mu.Unlock()
	rec.ChildPGID = pgid
	ctx, cancel := context.WithTimeout(context.Background(), callWait)
	defer cancel()
	go func() {
		select {
		case <-h.Lost():
			cancel()
		case <-ctx.Done():
		}
	}()
	resp, err := h.tk.c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.tk.key), "=", h.tk.rev)).
		Then(clientv3.OpPut(h.tk.key, rec.encode(), clientv3.WithLease(h.tk.k.id))).
		Commit()
	switch {
	case err != nil:
		return fmt.Errorf("etcd lock: recording the job: %w", err)
	case !resp.Succeeded:
		return errors.New("etcd lock: recording the job: the lock's key is no longer ours")
	}
	h.mu.Lock()
	h.tk.rec = rec
	h.mu.Unlock()
	return nil
}

// Release gives the lock up: it deletes the holder's key if it is still
// ours (never another's) and returns nil, or returns an error saying that
// etcd did not answer, and then the lock frees itself when its lease
// expires, within the TTL. The first call logs "releasing GPU lock" before
// the next waiter can take the lock; later calls do nothing and return
// nil.
func (h *Held) Release() error {
	if !h.released.CompareAndSwap(false, true) {
		return nil
	}
	// Said before the key goes, as lock.Held.Release says it: in a log
	// shared with the next holder, it comes before that one's acquired
	// line.
	h.o.Logger.Info("releasing GPU lock", "path", h.o.Path)
	close(h.stop)
	<-h.done
	defer h.tk.c.close()
	h.tk.k.stop()
	wait := callWait
	if h.lost.Reason() != nil {
		// Most likely etcd is away: try no longer than a first contact.
		wait = min(wait, h.tk.c.u.DialTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := h.tk.c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.tk.key), "=", h.tk.rev)).
		Then(clientv3.OpDelete(h.tk.key)).
		Commit()
	if err != nil {
		return fmt.Errorf("lock: release: %w (the lock frees itself when its lease expires, within %s)", err, h.tk.c.u.TTL)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), cancelWait)
	h.tk.c.cli.Revoke(rctx, h.tk.k.id)
	rcancel()
	if !resp.Succeeded {
		h.o.Logger.Warn("GPU lock was no longer ours at release; left it alone", "path", h.o.Path)
	}
	return nil
}
