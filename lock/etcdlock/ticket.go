package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/gpuexec/gpuexec/internal/lost"
	"github.com/gpuexec/gpuexec/lock"
)

// ticket is one waiter's place in the queue: its lease (renewed by its
// keeper), key and mutex.
type ticket struct {
	c   *conn
	k   *keeper
	m   *concurrency.Mutex
	key string
	rev int64 // the key's create revision
	rec record
}

// join queues this waiter: it is granted a lease, starts renewing it and
// puts its record under its key, behind every key already there.
func (b Backend) join(ctx context.Context, c *conn, o lock.Options) (*ticket, error) {
	rec, err := b.newRecord(o)
	if err != nil {
		return nil, err
	}
	gctx, cancel := context.WithTimeout(ctx, c.u.DialTimeout)
	defer cancel()
	sent := time.Now()
	lease, err := c.cli.Grant(gctx, int64(c.u.TTL/time.Second))
	if err != nil {
		return nil, fmt.Errorf("etcd lock: granting a lease: %w", err)
	}
	k := keepAlive(c.cli, lease.ID, sent, time.Duration(lease.TTL)*time.Second)
	// The mutex needs a session of the lease; the keeper, not the
	// session, renews it.
	sess, err := concurrency.NewSession(c.cli, concurrency.WithLease(lease.ID))
	if err != nil {
		k.stop()
		return nil, fmt.Errorf("etcd lock: session: %w", err)
	}
	sess.Orphan()
	tk := &ticket{c: c, k: k, m: concurrency.NewMutex(sess, c.mutexName()), rec: rec}
	tk.key = fmt.Sprintf("%s%x", c.prefix(), lease.ID)
	resp, err := c.cli.Txn(gctx).
		If(clientv3.Compare(clientv3.CreateRevision(tk.key), "=", 0)).
		Then(clientv3.OpPut(tk.key, rec.encode(), clientv3.WithLease(lease.ID))).
		Commit()
	if err != nil {
		tk.leave()
		return nil, fmt.Errorf("etcd lock: queueing: %w", err)
	}
	if !resp.Succeeded {
		tk.leave()
		return nil, fmt.Errorf("etcd lock: queueing: key %s already exists", tk.key)
	}
	tk.rev = resp.Header.Revision
	return tk, nil
}

// leave gives up the ticket: renewals stop and the lease is revoked
// (deleting the key) if etcd answers soon; else it expires by itself.
func (tk *ticket) leave() {
	tk.k.stop()
	ctx, cancel := context.WithTimeout(context.Background(), cancelWait)
	defer cancel()
	tk.c.cli.Revoke(ctx, tk.k.id)
}

// hold turns the ticket, first in the queue, into a held lock: the record
// gets acquiredAt (and the deadline), and the loss watch starts.
func (tk *ticket) hold(o lock.Options, start time.Time) (*Held, error) {
	now := time.Now().UTC()
	tk.rec.AcquiredAt = now.Format(isoMillis)
	if o.HoldLimit > 0 {
		tk.rec.Deadline = now.Add(o.HoldLimit).Format(isoMillis)
	}
	var err error
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), callWait)
		var resp *clientv3.TxnResponse
		resp, err = tk.c.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(tk.key), "=", tk.rev)).
			Then(clientv3.OpPut(tk.key, tk.rec.encode(), clientv3.WithLease(tk.k.id))).
			Commit()
		cancel()
		if err == nil && !resp.Succeeded {
			return nil, errTicketLost
		}
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("etcd lock: writing the holder's record: %w", err)
	}
	h := &Held{tk: tk, o: o, lost: lost.New(), stop: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan struct{})
	go h.watchLoss(ready)
	<-ready
	o.Logger.Info("acquired GPU lock", "path", o.Path, "owner", o.Owner, "slug", o.Slug, "waited", fmtAge(time.Since(start)))
	return h, nil
}

// errTicketLost says this waiter's key or lease went away (its lease
// expired while etcd was away, or someone cleared it).
var errTicketLost = errors.New("this waiter's key is gone")
