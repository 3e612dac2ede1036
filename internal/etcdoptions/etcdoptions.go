// Package etcdoptions says what an etcd:// lock accepts of lock.Options.
// Both sides of an etcd lock check with it: package etcdlock, which holds
// the lock with the etcd client, and package etcdhelper's client, which
// has the gpuexec-etcd helper hold it; so neither imports the other.
package etcdoptions

import (
	"time"

	"github.com/gpuexec/gpuexec/internal/etcdurl"
	"github.com/gpuexec/gpuexec/lock"
)

// Check reports what is wrong with o for an etcd lock, touching nothing,
// and returns its URL taken apart: the URL (see package etcdurl), the
// durations and names (lock.Options' Validate), and devices, which an etcd
// lock does not have. Each problem is a *lock.OptionError.
func Check(o lock.Options) (*etcdurl.URL, error) {
	if err := lock.CheckPath(o.Path); err != nil {
		return nil, err
	}
	u, err := etcdurl.Parse(o.Path)
	if err != nil {
		return nil, &lock.OptionError{Option: "path", Problem: err.Error()}
	}
	if len(o.Devices) > 0 {
		return nil, &lock.OptionError{Option: "devices", Problem: "needs a lock file: an etcd:// lock is one lock; give each GPU a key of its own (--lock etcd://.../gpu0)"}
	}
	return u, o.Validate()
}

// LeaseTTL is the lease's time to live of the etcd lock o names (the
// URL's ttl=, or its default), or false when o.Path is no etcd URL that
// Check would take apart: both backends' lock.Leased.
func LeaseTTL(o lock.Options) (time.Duration, bool) {
	u, err := etcdurl.Parse(o.Path)
	if err != nil {
		return 0, false
	}
	return u.TTL, true
}
