package etcdlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keeper renews a lease every sixth of its TTL until stopped, and keeps
// the time the last renewal etcd confirmed was sent. etcd's leader renews
// a lease when the renewal reaches it, to expire TTL later; so the lease
// cannot expire before that sending time plus the TTL, whatever became of
// the answers and renewals after it.
type keeper struct {
	cli   *clientv3.Client
	id    clientv3.LeaseID
	every time.Duration

	mu    sync.Mutex
	sent  time.Time     // when the last renewal etcd confirmed was sent
	grant time.Duration // the TTL etcd confirmed with it

	renewed chan struct{} // a token after each confirmed renewal
	gone    chan struct{} // closed when etcd says the lease does not exist
	cancel  context.CancelFunc
	done    chan struct{}
}

// keepAlive starts renewing lease id, granted (or last renewed) with TTL grant
// by a request sent at sent.
func keepAlive(cli *clientv3.Client, id clientv3.LeaseID, sent time.Time, grant time.Duration) *keeper {
	ctx, cancel := context.WithCancel(context.Background())
	k := &keeper{cli: cli, id: id, every: max(grant/6, 100*time.Millisecond), sent: sent, grant: grant,
		renewed: make(chan struct{}, 1), gone: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go k.run(ctx)
	return k
}

// confirmed is when the last renewal etcd confirmed was sent, and its TTL.
func (k *keeper) confirmed() (time.Time, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sent, k.grant
}

// safeUntil is the latest time a holder may still use the lock: two
// thirds of the TTL after the last renewal etcd confirmed was sent, a
// third of the TTL before etcd may let the lease expire.
func (k *keeper) safeUntil() time.Time {
	sent, grant := k.confirmed()
	return sent.Add(grant - grant/3)
}

// stop ends the renewals and returns once none is under way.
func (k *keeper) stop() {
	k.cancel()
	<-k.done
}

// run renews the lease every k.every until ctx ends or etcd says the lease
// is gone (then it closes gone); a renewal not confirmed within k.every is
// tried again a quarter of that after it began.
func (k *keeper) run(ctx context.Context) {
	defer close(k.done)
	sent, _ := k.confirmed()
	next := sent.Add(k.every)
	for {
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		// Taken before the renewal is sent, on whichever stream and
		// member: etcd renews the lease when a renewal reaches it, never
		// before.
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, k.every)
		// KeepAliveOnce sends one renewal on a stream of its own (again on
		// a new one if that stream breaks), waiting at most every.
		resp, err := k.cli.KeepAliveOnce(rctx, k.id)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			close(k.gone)
			return
		case err == nil:
			k.mu.Lock()
			k.sent, k.grant = start, time.Duration(resp.TTL)*time.Second
			k.mu.Unlock()
			select {
			case k.renewed <- struct{}{}:
			default:
			}
			next = start.Add(k.every)
		default:
			// Not answered in time, or refused: try again soon, on a
			// new stream (perhaps through another member).
			next = start.Add(max(k.every/4, 50*time.Millisecond))
		}
	}
}
