// Package etcdlock is the etcd v3 backend of package lock: the lock named
// by an etcd:// URL (etcd://HOST:PORT[,HOST:PORT...]/KEY[?ttl=...]; see
// docs/etcd.md) is a key prefix on an etcd cluster. With T the URL's ttl:
//
//   - Waiters are served in arrival order, across machines.
//   - A holder's Lost is closed at least T/3 before etcd can let the next
//     waiter take the lock (durations measured on each machine's own
//     clock, which must run at the rate of etcd's): a holder that stops
//     its job within T/3 of Lost never runs beside the next holder's job.
//   - A holder that dies, or loses etcd, frees the lock within T of the
//     last renewal etcd confirmed.
//   - A waiter whose place is lost while etcd is away queues again at the
//     back, until its context ends.
//   - status and clear read and judge the lock as they do lock files.
//
// How:
//
//   - Each waiter is granted a lease of TTL T, its heartbeat, and puts its
//     record under KEY#/<lease id in hex>, bound to that lease. The key with
//     the lowest create revision holds the lock; the others wait, in
//     create-revision (arrival) order, with the etcd client's
//     concurrency.Mutex. No KEY holds a '#', so no lock's prefix KEY#/ is a
//     prefix of another lock's keys: /t/box and /t/box/gpu0 are two locks.
//     Releases before this layout put the keys under KEY/ and do not
//     exclude jobs of this one.
//   - The lease is renewed every T/6, each renewal on a stream of its own
//     (a member that does not answer holds up one renewal, not the next),
//     and the time each renewal that etcd confirmed was sent is kept: etcd
//     cannot let the lease expire before that time plus T. The holder
//     declares the lock lost when etcd says its lease is gone, when its key
//     is deleted, or 2T/3 after the last renewal etcd confirmed was sent.
//   - The record is the lock file's (pid, acquiredAt, owner, slug, token,
//     host, ...), plus since (when the waiter arrived).
//
// Linking this package adds the etcd client (gRPC, protobuf) and its
// start-up cost to a program; gpuexec keeps it in its helper program,
// gpuexec-etcd (cmd/gpuexec-etcd), which serves with this backend.
package etcdlock

import (
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/etcdoptions"
	"github.com/gpuexec/gpuexec/lock"
)

// Backend is the lock.Backend of etcd:// locks. Its zero value is ready to
// use and records this process's pid as the holder's.
type Backend struct {
	// PID is the pid recorded in the lock as the holder's; 0 means this
	// process's. The gpuexec-etcd helper records gpuexec's.
	PID int
}

var _ lock.Leased = Backend{}

// Bounds on single etcd calls that must not hang while etcd is away (the
// client waits for a connection as long as its context lets it).
const (
	callWait    = 5 * time.Second        // a release, a record update
	cancelWait  = 3 * time.Second        // a waiter's clean-up after it gave up
	firstRetry  = 100 * time.Millisecond // the first pause before queueing again after an error
	retryPause  = time.Second            // the longest: the pause doubles up to it
	listTimeout = 2 * time.Second        // the listing behind a waiting line
)

// withDefaults fills in what o leaves to the backend: the report interval
// and a logger.
func withDefaults(o lock.Options) lock.Options {
	if o.Report <= 0 {
		o.Report = lock.DefaultReport
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return o
}

// Check reports what is wrong with o for an etcd lock (a *lock.OptionError),
// touching nothing: Acquire, TryAcquire, Inspect and Clear refuse the same
// options with the same error.
func (Backend) Check(o lock.Options) error {
	_, err := etcdoptions.Check(o)
	return err
}

// LeaseTTL is the time to live of the lease that holds the lock o names:
// the URL's ttl=, or its default; false when o.Path is no etcd:// URL
// (Check says why).
func (Backend) LeaseTTL(o lock.Options) (time.Duration, bool) { return etcdoptions.LeaseTTL(o) }

// fmtAge renders a duration as the log lines of every backend do.
func fmtAge(d time.Duration) string { return d.Round(time.Second).String() }
