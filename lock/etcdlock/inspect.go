package etcdlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gpuexec/gpuexec/lock"
)

// Inspect reads the lock and its queue, and changes nothing. The holder's
// heartbeat age (Status.HeartbeatAge) is the time since its lease was last
// renewed, to the second; a holder whose lease has expired, or whose key
// has none, is stale.
func (Backend) Inspect(o lock.Options) (*lock.Report, error) {
	c, err := dial(o)
	if err != nil {
		return nil, err
	}
	defer c.close()
	st, queue, _, err := readLock(c, callWait)
	if err != nil {
		return nil, err
	}
	return &lock.Report{Path: o.Path, Locks: []*lock.Status{st}, Queue: queue}, nil
}

// holderNow is the holder as seen now, for a TryAcquire that met
// contention or an Acquire that gave up; nil when it cannot be read within
// listTimeout.
func holderNow(c *conn) *lock.Status {
	st, _, _, err := readLock(c, listTimeout)
	if err != nil {
		return nil
	}
	return st
}

// readLock lists the queue and judges its first key, the holder's, within
// limit: the holder's status, the waiters behind it, and the holder's key
// (nil when the lock is free).
func readLock(c *conn, limit time.Duration) (*lock.Status, []lock.Waiter, *mvccpb.KeyValue, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	kvs, err := list(ctx, c)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("etcd lock: reading %s: %w", c.prefix(), err)
	}
	if len(kvs) == 0 {
		return &lock.Status{State: lock.StateFree, Path: c.path}, nil, nil, nil
	}
	st := keyStatus(c, kvs[0])
	now := time.Now()
	switch {
	case kvs[0].Lease == 0:
		st.State, st.Alive = lock.StateStale, false
		st.Reason = "its key has no lease (not written by gpuexec): it would never expire"
	default:
		ttl, err := c.cli.TimeToLive(ctx, clientv3.LeaseID(kvs[0].Lease))
		switch {
		case err != nil:
			return nil, nil, nil, fmt.Errorf("etcd lock: reading the holder's lease: %w", err)
		case ttl.TTL < 0:
			st.State, st.Alive = lock.StateStale, false
			st.Reason = "its lease has expired"
		default:
			age := time.Duration(ttl.GrantedTTL-ttl.TTL) * time.Second
			st.HeartbeatAge = age
			st.ModTime = now.Add(-age)
		}
	}
	if st.Info == nil && st.State == lock.StateHeld {
		st.Reason = "its record is not a gpuexec record"
	}
	var queue []lock.Waiter
	for i, kv := range kvs[1:] {
		w := lock.Waiter{Position: i + 1, Seq: uint64(kv.CreateRevision), Alive: true}
		var rec record
		if json.Unmarshal(kv.Value, &rec) == nil {
			w.PID, w.Owner, w.Slug, w.Host, w.Since = rec.PID, rec.Owner, rec.Slug, rec.Host, rec.Since
		}
		queue = append(queue, w)
	}
	return st, queue, kvs[0], nil
}

// list is the queue: every key under the prefix, oldest first.
func list(ctx context.Context, c *conn) ([]*mvccpb.KeyValue, error) {
	resp, err := c.cli.Get(ctx, c.prefix(), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	return resp.Kvs, nil
}

// keyStatus is the status of the lock held under kv, without the lease
// check of readLock.
func keyStatus(c *conn, kv *mvccpb.KeyValue) *lock.Status {
	st := &lock.Status{State: lock.StateHeld, Path: c.path, Alive: true, Content: kv.Value}
	var rec record
	if err := json.Unmarshal(kv.Value, &rec); err == nil && rec.PID > 0 {
		st.Info = &rec.Info
	}
	var fields map[string]any
	if json.Unmarshal(kv.Value, &fields) == nil {
		st.Fields = fields
	}
	return st
}

// Clear removes the holder's key if it is stale, or with force a live
// holder's, and returns the holder as judged; a live holder without force
// is left alone and an error wrapping lock.ErrHeld returned. A forced
// clear revokes the holder's lease, so that its Lost is closed at once.
// Only the key judged is removed, never one created since; waiters are
// left alone. It logs nothing of the lock it returns: the caller says what
// was cleared.
func (Backend) Clear(o lock.Options, force bool) (*lock.Status, error) {
	c, err := dial(o)
	if err != nil {
		return nil, err
	}
	defer c.close()
	st, _, kv, err := readLock(c, callWait)
	if err != nil || st.State == lock.StateFree {
		return st, err
	}
	if st.State == lock.StateHeld && !force {
		return st, fmt.Errorf("%w: %s", lock.ErrHeld, st.Holder())
	}
	ctx, cancel := context.WithTimeout(context.Background(), callWait)
	defer cancel()
	if kv.Lease != 0 {
		if _, err := c.cli.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return st, fmt.Errorf("etcd lock: revoking the holder's lease: %w", err)
		}
	}
	// A key without a lease, or one whose lease was already gone.
	if _, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)).
		Then(clientv3.OpDelete(string(kv.Key))).
		Commit(); err != nil {
		return st, fmt.Errorf("etcd lock: deleting %s: %w", kv.Key, err)
	}
	return st, nil
}
