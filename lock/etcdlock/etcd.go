// Package etcdlock is the etcd v3 backend of package lock: the lock named
// by an etcd:// URL (see package etcdurl) is a key prefix on an etcd
// cluster, held with go.etcd.io/etcd/client/v3's concurrency package.
//
//   - Each waiter is granted a lease (TTL from the URL's ttl=), its
//     heartbeat, and puts its record under KEY#/<lease id in hex>, bound to
//     that lease. The key with the lowest create revision holds the lock;
//     the others wait, in create-revision (arrival) order, with
//     concurrency.Mutex. KEY holds no '#' (etcdurl.Separator), so no lock's
//     prefix KEY#/ is a prefix of another lock's keys: /t/box and
//     /t/box/gpu0 are two locks. Releases before this layout put the keys
//     under KEY/ and do not exclude jobs of this one.
//   - The lease is renewed every sixth of its TTL, each renewal on a stream
//     of its own (a member that does not answer holds up one renewal, not
//     the next), and the time each renewal that etcd confirmed was sent is
//     kept: etcd cannot let the lease expire before that time plus the TTL.
//   - The record is the lock file's (pid, acquiredAt, owner, slug, token,
//     host, ...), plus since (when the waiter arrived), so status and clear
//     work as for files.
//   - A holder that dies stops renewing its lease; etcd deletes its key when
//     the lease expires and the next waiter proceeds.
//   - A holder that loses etcd cannot renew its lease either: it declares
//     the lock lost (Lost) when etcd says its lease is gone, when its key
//     is deleted, or — before the lease can expire — two thirds of the TTL
//     after the last renewal etcd confirmed was sent.
//   - A waiter whose lease is gone (it expired while etcd was away) queues
//     again at the back, with a new client and lease, after a pause that
//     doubles up to a second.
//
// Linking this package adds the etcd client (gRPC, protobuf) and its
// start-up cost to a program; gpuexec keeps it in the helper program
// gpuexec-etcd instead (see package etcdhelper), which serves with this
// backend.
package etcdlock

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpuexec/gpuexec/internal/etcdoptions"
	"github.com/gpuexec/gpuexec/internal/etcdurl"
	"github.com/gpuexec/gpuexec/internal/lost"
	"github.com/gpuexec/gpuexec/lock"
)

// Backend is the etcd backend. The zero value records this process's pid
// as the holder's.
type Backend struct {
	// PID is the pid recorded in the lock as the holder's; 0 means this
	// process's. The gpuexec-etcd helper records gpuexec's.
	PID int
}

var _ lock.Backend = Backend{}

// Bounds on single etcd calls that must not hang while etcd is away (the
// client waits for a connection as long as its context lets it).
const (
	callWait    = 5 * time.Second        // a release, a record update
	cancelWait  = 3 * time.Second        // a waiter's clean-up after it gave up
	firstRetry  = 100 * time.Millisecond // the first pause before queueing again after an error
	retryPause  = time.Second            // the longest: the pause doubles up to it
	listTimeout = 2 * time.Second        // the listing behind a waiting line
)

// record is what a waiter's or holder's key holds: the lock file's record
// and when the waiter arrived.
type record struct {
	lock.Info
	Since string `json:"since,omitempty"`
}

// isoMillis is JavaScript's toISOString layout, as in lock files.
const isoMillis = "2006-01-02T15:04:05.000Z"

// conn is a client connected to the lock's cluster.
type conn struct {
	cli  *clientv3.Client
	u    *etcdurl.URL
	path string // the lock's URL

	closeOnce sync.Once
	closed    chan struct{}
}

// mutexName is the lock's name in the key layout: KEY and the separator no
// KEY holds. concurrency.Mutex adds the "/" of prefix.
func (c *conn) mutexName() string { return c.u.Key + etcdurl.Separator }

// prefix is what the lock's keys start with, and no other lock's do (see
// the package's doc): every listing and deletion is under it.
func (c *conn) prefix() string { return c.mutexName() + "/" }

func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.cli.Close()
	})
}

func (c *conn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// dial connects to the cluster named by path and checks within the URL's
// dial timeout that it answers; a cluster that does not is
// lock.ErrUnreachable.
func dial(o lock.Options) (*conn, error) {
	u, err := etcdoptions.Check(o)
	if err != nil {
		return nil, err
	}
	path := o.Path
	cfg := clientv3.Config{
		DialTimeout:          u.DialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zap.NewNop(),
	}
	scheme := "http://"
	if u.TLS() {
		scheme = "https://"
		if cfg.TLS, err = tlsConfig(u); err != nil {
			return nil, err
		}
	}
	for _, ep := range u.Endpoints {
		cfg.Endpoints = append(cfg.Endpoints, scheme+ep)
	}
	if u.User != "" {
		cfg.Username = u.User
		if u.PasswordFile != "" {
			if cfg.Password, err = readPassword(u.PasswordFile); err != nil {
				return nil, err
			}
		}
	}
	where := strings.Join(u.Endpoints, ",")
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, unreachable(where, u.DialTimeout, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), u.DialTimeout)
	defer cancel()
	c := &conn{cli: cli, u: u, path: path, closed: make(chan struct{})}
	if _, err := cli.Get(ctx, c.prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, unreachable(where, u.DialTimeout, err)
	}
	return c, nil
}

// unreachable words a failed first contact; only a cluster that did not
// answer (as opposed to one that refused us) is lock.ErrUnreachable.
func unreachable(where string, timeout time.Duration, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || codeOf(err) == codes.DeadlineExceeded:
		return fmt.Errorf("lock: etcd at %s did not answer within %s (the URL's dial-timeout): %w", where, timeout, lock.ErrUnreachable)
	case codeOf(err) == codes.Unavailable:
		return fmt.Errorf("lock: etcd at %s: %v: %w", where, err, lock.ErrUnreachable)
	}
	return fmt.Errorf("lock: etcd at %s: %w", where, err)
}

// codeOf is err's gRPC code, whether err is an etcd server error
// (rpctypes.EtcdError, which the client makes of the errors it knows) or a
// gRPC status; codes.Unknown for anything else.
func codeOf(err error) codes.Code {
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		return etcdErr.Code()
	}
	return status.Code(err)
}

func tlsConfig(u *etcdurl.URL) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if u.CACert != "" {
		pem, err := os.ReadFile(u.CACert)
		if err != nil {
			return nil, fmt.Errorf("etcd lock: cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd lock: cacert %s holds no PEM certificate", u.CACert)
		}
		tc.RootCAs = pool
	}
	if u.Cert != "" {
		cert, err := tls.LoadX509KeyPair(u.Cert, u.CertKey)
		if err != nil {
			return nil, fmt.Errorf("etcd lock: cert/key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// readPassword is the first line of file.
func readPassword(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("etcd lock: password-file: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return "", fmt.Errorf("etcd lock: password-file %s: empty", file)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func withDefaults(o lock.Options) lock.Options {
	if o.Report <= 0 {
		o.Report = lock.DefaultReport
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return o
}

func (b Backend) newRecord(o lock.Options) (record, error) {
	var t [8]byte
	if _, err := rand.Read(t[:]); err != nil {
		return record{}, fmt.Errorf("lock: making a token: %w", err)
	}
	pid := b.PID
	if pid == 0 {
		pid = os.Getpid()
	}
	host, _ := os.Hostname()
	return record{
		Info: lock.Info{
			PID:   pid,
			Owner: o.Owner,
			Slug:  o.Slug,
			Token: hex.EncodeToString(t[:]),
			Host:  host,
		},
		Since: time.Now().UTC().Format(isoMillis),
	}, nil
}

func (r record) encode() string {
	b, err := json.Marshal(r)
	if err != nil {
		panic("etcdlock: encoding a record: " + err.Error())
	}
	return string(b)
}

// place is one waiter's place in the queue: its lease (renewed by its
// keeper), key and mutex.
type place struct {
	c   *conn
	k   *keeper
	m   *concurrency.Mutex
	key string
	rev int64 // the key's create revision
	rec record
}

// join is granted a lease, starts renewing it and puts this waiter's
// record under its key.
func (b Backend) join(ctx context.Context, c *conn, o lock.Options) (*place, error) {
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
	k := keep(c.cli, lease.ID, sent, time.Duration(lease.TTL)*time.Second)
	// The mutex needs a session of the lease; the keeper, not the
	// session, renews it.
	sess, err := concurrency.NewSession(c.cli, concurrency.WithLease(lease.ID))
	if err != nil {
		k.stop()
		return nil, fmt.Errorf("etcd lock: session: %w", err)
	}
	sess.Orphan()
	p := &place{c: c, k: k, m: concurrency.NewMutex(sess, c.mutexName()), rec: rec}
	p.key = fmt.Sprintf("%s%x", c.prefix(), lease.ID)
	resp, err := c.cli.Txn(gctx).
		If(clientv3.Compare(clientv3.CreateRevision(p.key), "=", 0)).
		Then(clientv3.OpPut(p.key, rec.encode(), clientv3.WithLease(lease.ID))).
		Commit()
	if err != nil {
		p.leave()
		return nil, fmt.Errorf("etcd lock: queueing: %w", err)
	}
	if !resp.Succeeded {
		p.leave()
		return nil, fmt.Errorf("etcd lock: queueing: key %s already exists", p.key)
	}
	p.rev = resp.Header.Revision
	return p, nil
}

// leave gives up the place: renewals stop and the lease is revoked
// (deleting the key) if etcd answers soon; else it expires by itself.
func (p *place) leave() {
	p.k.stop()
	ctx, cancel := context.WithTimeout(context.Background(), cancelWait)
	defer cancel()
	p.c.cli.Revoke(ctx, p.k.id)
}

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

// keep starts renewing lease id, granted (or last renewed) with TTL grant
// by a request sent at sent.
func keep(cli *clientv3.Client, id clientv3.LeaseID, sent time.Time, grant time.Duration) *keeper {
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

// stopAt is the latest time a holder may still use the lock: two thirds of
// the TTL after the last renewal etcd confirmed was sent, a third of the
// TTL before etcd may let the lease expire.
func (k *keeper) stopAt() time.Time {
	sent, grant := k.confirmed()
	return sent.Add(grant - grant/3)
}

func (k *keeper) stop() {
	k.cancel()
	<-k.done
}

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

// held turns the place into a held lock: the record gets acquiredAt.
func (p *place) held(o lock.Options, start time.Time) (*Held, error) {
	now := time.Now().UTC()
	p.rec.AcquiredAt = now.Format(isoMillis)
	if o.HoldLimit > 0 {
		p.rec.Deadline = now.Add(o.HoldLimit).Format(isoMillis)
	}
	var err error
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), callWait)
		var resp *clientv3.TxnResponse
		resp, err = p.c.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(p.key), "=", p.rev)).
			Then(clientv3.OpPut(p.key, p.rec.encode(), clientv3.WithLease(p.k.id))).
			Commit()
		cancel()
		if err == nil && !resp.Succeeded {
			return nil, errPlaceLost
		}
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("etcd lock: writing the holder's record: %w", err)
	}
	h := &Held{p: p, o: o, lost: lost.New(), stop: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan struct{})
	go h.monitor(ready)
	<-ready
	o.Logger.Info("acquired GPU lock", "path", o.Path, "owner", o.Owner, "slug", o.Slug, "waited", fmtAge(time.Since(start)))
	return h, nil
}

// errPlaceLost says this waiter's key or lease went away (its lease
// expired while etcd was away, or someone cleared it).
var errPlaceLost = errors.New("this waiter's key is gone")

// Acquire queues for the lock until it holds it or ctx ends (a
// *lock.WaitError). It logs the holder and this waiter's position every
// Options.Report. A waiter that loses its place (its lease expired while
// etcd was away) queues again at the back, with a new client and lease;
// other etcd errors while waiting are retried. Either is logged once per
// Options.Report at most, and the pause before the next try doubles from
// 100 ms up to a second. Only an etcd that cannot be reached at all at
// the start fails at once (lock.ErrUnreachable).
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
			// The last client was closed: a place lost, or given up
			// while etcd did not answer.
			c, err = dial(o)
		}
		if c != nil {
			var h *Held
			if h, err = b.wait(ctx, c, o, start, &seen); err == nil {
				return h, nil
			}
			if c.isClosed() {
				c = nil
			}
		}
		if ctx.Err() != nil {
			if c != nil {
				// Who is in the way now, not at the last report.
				if st := holderSeen(c); st != nil {
					seen = st
				}
				c.close()
			}
			return nil, &lock.WaitError{Seen: []*lock.Status{seen}, Waited: time.Since(start), Err: ctx.Err()}
		}
		now := time.Now()
		if errors.Is(err, errPlaceLost) || errors.Is(err, concurrency.ErrSessionExpired) {
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

// wait is one place in the queue, from joining to holding (or an error).
func (b Backend) wait(ctx context.Context, c *conn, o lock.Options, start time.Time, seen **lock.Status) (*Held, error) {
	p, err := b.join(ctx, c, o)
	if err != nil {
		return nil, err
	}
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	locked := make(chan error, 1)
	go func() { locked <- p.m.Lock(lctx) }()

	// giveUp ends the wait: the Mutex deletes its key unless etcd is away;
	// then the client is closed to unblock it, and the lease expires by
	// itself.
	giveUp := func() {
		lcancel()
		t := time.NewTimer(cancelWait)
		defer t.Stop()
		select {
		case <-locked:
			p.leave()
		case <-t.C:
			p.k.stop()
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
				p.leave()
				return nil, err
			}
			h, err := p.held(o, start)
			if err != nil {
				p.leave()
			}
			return h, err
		case <-p.k.gone:
			giveUp()
			return nil, errPlaceLost
		case <-ctx.Done():
			giveUp()
			return nil, ctx.Err()
		case <-report.C:
			if line, st := p.waitingLine(ctx, start); line != "" {
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
func (p *place) waitingLine(ctx context.Context, start time.Time) (string, *lock.Status) {
	w := lock.Waiting{Waited: time.Since(start)}
	w.Until, _ = ctx.Deadline()
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	kvs, err := list(ctx, p.c)
	if err != nil {
		return "waiting for GPU lock: cannot read the queue from etcd (" + err.Error() + "); waited " + fmtAge(w.Waited) + ", still waiting", nil
	}
	pos := -1
	for i, kv := range kvs {
		if string(kv.Key) == p.key {
			pos = i
		}
	}
	if len(kvs) == 0 || pos == 0 {
		return "", nil
	}
	st := holderStatus(p.c, kvs[0])
	if pos < 0 {
		pos = len(kvs) // our key is not visible yet
	}
	// The first key is the holder's: the waiters are the others.
	w.Position, w.Of = pos, max(len(kvs)-1, pos)
	return st.WaitingLine(w), st
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

// holderStatus is the status of the lock held under kv, without the lease
// check of inspect.
func holderStatus(c *conn, kv *mvccpb.KeyValue) *lock.Status {
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

// TryAcquire takes the lock if nobody holds it or waits for it.
func (b Backend) TryAcquire(o lock.Options) (lock.Locker, error) {
	o = withDefaults(o)
	c, err := dial(o)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), c.u.DialTimeout+callWait)
	defer cancel()
	p, err := b.join(ctx, c, o)
	if err != nil {
		c.close()
		return nil, err
	}
	switch err := p.m.TryLock(ctx); {
	case errors.Is(err, concurrency.ErrLocked):
		p.leave()
		seen := holderSeen(c)
		c.close()
		return nil, &lock.WaitError{Seen: []*lock.Status{seen}, Err: lock.ErrHeld}
	case err != nil:
		p.leave()
		c.close()
		return nil, err
	}
	h, err := p.held(o, start)
	if err != nil {
		p.leave()
		c.close()
		return nil, err
	}
	return h, nil
}

// Inspect reads the lock and its queue. The holder's heartbeat age is the
// time since its lease was last renewed.
func (Backend) Inspect(o lock.Options) (*lock.Report, error) {
	c, err := dial(o)
	if err != nil {
		return nil, err
	}
	defer c.close()
	st, queue, _, err := inspect(c, callWait)
	if err != nil {
		return nil, err
	}
	return &lock.Report{Path: o.Path, Locks: []*lock.Status{st}, Queue: queue}, nil
}

// Check reports what is wrong with o for an etcd lock, touching nothing.
func (Backend) Check(o lock.Options) error {
	_, err := etcdoptions.Check(o)
	return err
}

// holderSeen is the holder as seen now, for a TryAcquire that met
// contention or an Acquire that gave up; nil when it cannot be read within
// listTimeout.
func holderSeen(c *conn) *lock.Status {
	st, _, _, err := inspect(c, listTimeout)
	if err != nil {
		return nil
	}
	return st
}

func inspect(c *conn, limit time.Duration) (*lock.Status, []lock.Waiter, *mvccpb.KeyValue, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	kvs, err := list(ctx, c)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("etcd lock: reading %s: %w", c.prefix(), err)
	}
	if len(kvs) == 0 {
		return &lock.Status{State: lock.StateFree, Path: c.path}, nil, nil, nil
	}
	st := holderStatus(c, kvs[0])
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

// Clear removes the holder's key if it is stale, or with force a live
// holder's (revoking its lease, so that it notices at once), and returns
// it as judged; it logs nothing of it: the caller says what was cleared.
// Waiters are left alone.
func (Backend) Clear(o lock.Options, force bool) (*lock.Status, error) {
	c, err := dial(o)
	if err != nil {
		return nil, err
	}
	defer c.close()
	st, _, kv, err := inspect(c, callWait)
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

// Held is a held etcd lock. Its lease is renewed until Release. Its
// methods are safe for concurrent use.
type Held struct {
	p *place
	o lock.Options

	mu       sync.Mutex // guards p.rec
	released atomic.Bool

	lost *lost.Signal // see Lost
	stop chan struct{}
	done chan struct{}
}

var _ lock.Locker = (*Held)(nil)

// Path is the lock's URL.
func (h *Held) Path() string { return h.o.Path }

// Key is the holder's key in etcd.
func (h *Held) Key() string { return h.p.key }

// Info is the holder's record.
func (h *Held) Info() lock.Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.p.rec.Info
}

// Lost is closed when the lock may no longer be ours: etcd says the lease
// is gone, the key was deleted, or two thirds of the TTL have passed since
// the last renewal etcd confirmed was sent — a third of the TTL before
// etcd may let the lease expire and give the lock to the next waiter, so
// that the job can be stopped first.
func (h *Held) Lost() <-chan struct{} { return h.lost.Lost() }

// LostReason says why Lost was closed; nil while it is not.
func (h *Held) LostReason() error { return h.lost.Reason() }

func (h *Held) markLost(why error) {
	h.lost.Mark(why, func() { h.o.Logger.Error("GPU lock lost", "path", h.o.Path, "reason", why) })
}

// monitor watches the lease's renewals and the key until Release, closing
// ready once it watches.
func (h *Held) monitor(ready chan<- struct{}) {
	defer close(h.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cli, k := h.p.c.cli, h.p.k
	wch := cli.Watch(ctx, h.p.key, clientv3.WithRev(h.p.rev+1), clientv3.WithFilterPut())
	close(ready)
	deadline := time.NewTimer(time.Until(k.stopAt()))
	defer deadline.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-k.gone:
			h.markLost(errors.New("etcd says the lock's lease is gone: it expired or was revoked"))
			return
		case <-k.renewed:
			deadline.Reset(time.Until(k.stopAt()))
		case <-deadline.C:
			if stop := k.stopAt(); time.Now().Before(stop) {
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
				resp, gerr := cli.Get(gctx, h.p.key)
				gcancel()
				if gerr == nil && (len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != h.p.rev) {
					h.markLost(errors.New("the lock's key in etcd is gone"))
					return
				}
				rev := int64(0)
				if gerr == nil {
					rev = resp.Header.Revision + 1
				}
				wch = cli.Watch(ctx, h.p.key, clientv3.WithRev(rev), clientv3.WithFilterPut())
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

// RecordChild writes the job's process group into the record (childPgid),
// if the key is still ours. It gives up when the lock is lost: whoever
// waits for it (the helper, before it passes the loss on) must not wait
// for an etcd that does not answer.
func (h *Held) RecordChild(pgid int) error {
	h.mu.Lock()
	rec := h.p.rec
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
	resp, err := h.p.c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.p.key), "=", h.p.rev)).
		Then(clientv3.OpPut(h.p.key, rec.encode(), clientv3.WithLease(h.p.k.id))).
		Commit()
	switch {
	case err != nil:
		return fmt.Errorf("etcd lock: recording the job: %w", err)
	case !resp.Succeeded:
		return errors.New("etcd lock: recording the job: the lock's key is no longer ours")
	}
	h.mu.Lock()
	h.p.rec = rec
	h.mu.Unlock()
	return nil
}

// Release deletes the key if it is still ours and revokes the lease. If
// etcd does not answer, the lease expires by itself within its TTL. The
// first call logs "releasing GPU lock" before it deletes anything; later
// calls do nothing.
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
	defer h.p.c.close()
	h.p.k.stop()
	wait := callWait
	if h.lost.Reason() != nil {
		// Most likely etcd is away: try no longer than a first contact.
		wait = min(wait, h.p.c.u.DialTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := h.p.c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.p.key), "=", h.p.rev)).
		Then(clientv3.OpDelete(h.p.key)).
		Commit()
	if err != nil {
		return fmt.Errorf("lock: release: %w (the lock frees itself when its lease expires, within %s)", err, h.p.c.u.TTL)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), cancelWait)
	h.p.c.cli.Revoke(rctx, h.p.k.id)
	rcancel()
	if !resp.Succeeded {
		h.o.Logger.Warn("GPU lock was no longer ours at release; left it alone", "path", h.o.Path)
	}
	return nil
}

// fmtAge renders a duration as the log lines of every backend do.
func fmtAge(d time.Duration) string { return d.Round(time.Second).String() }
