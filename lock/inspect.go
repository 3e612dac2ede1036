package lock

import (
	"errors"
	"time"
)

// inspectAll reads and judges t's locks without the guard, each named by
// its device: for Inspect, and for a wait that ended before a try saw
// them. One that cannot be read is left out and its error returned.
func inspectAll(o Options, t lockSet) ([]*Status, error) {
	var seen []*Status
	var errs []error
	for i, p := range t.paths {
		st, err := inspectOne(p, o.Stale)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if t.names != nil {
			st.Device = t.names[i]
		}
		seen = append(seen, st)
	}
	return seen, errors.Join(errs...)
}

// judgeLock judges the lock read as st (see judge) on this host, a shared
// record's sharers listed first (with prune, under the guard, dead ones'
// sidecars removed): they keep it held while their jobs run.
func judgeLock(st *Status, stale time.Duration, prune bool) {
	if st.Info != nil && st.Info.Share {
		st.Sharers = listSharers(st.Path, stale, prune)
	}
	judge(st, time.Now(), stale, osProber{lockPath: st.Path})
	if st.State != StateHeld {
		st.Sharers = nil
	}
}

// inspectSeen is inspectAll with, after t's locks, those beside them that
// keep them from being taken (see cover.go), as attempt's seen has them.
func inspectSeen(o Options, t lockSet) ([]*Status, error) {
	seen, err := inspectAll(o, t)
	if err != nil {
		return seen, err
	}
	if t.names == nil {
		return append(seen, inspectBeside(o)...), nil
	}
	if st, err := inspectOne(o.Path, o.Stale); err == nil && coverBlocks(st) {
		seen = append(seen, st)
	}
	return seen, nil
}

// inspectOne reads and judges the lock file at path, changing nothing.
func inspectOne(path string, stale time.Duration) (*Status, error) {
	st, err := readStatus(path)
	if err != nil {
		return nil, err
	}
	if st.State != StateFree {
		judgeLock(st, stale, false)
	} else if busy := findOrphan(path, stale); busy != nil {
		st = busy
	}
	return st, nil
}
