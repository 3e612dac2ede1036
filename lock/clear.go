package lock

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
)

// clearOne is Clear of the lock file at o.Path.
func clearOne(o Options, force bool) (*Status, error) {
	// A free lock, and a path that is no lock, are told without the
	// guard: nothing is created beside them, a read-only folder answers.
	st, err := readStatus(o.Path)
	if err != nil {
		return nil, err
	}
	if st.State == StateFree {
		var busy *Status
		if force {
			var cleared []*Status
			busy, cleared = clearLeftovers(o.Path, o.Stale)
			for _, c := range cleared {
				o.Logger.Warn("cleared a file that kept the free GPU lock held", "path", o.Path, "file", filepath.Base(c.Orphan), "reason", c.Reason)
			}
		} else {
			busy = findOrphan(o.Path, o.Stale)
		}
		if busy != nil {
			return busy, fmt.Errorf("%w: %s; nothing to clear: the lock is free once that job ends", ErrHeld, busy.Holder())
		}
		return st, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), clearGuardWait)
	defer cancel()
	g, err := takeGuard(ctx, o.Path)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, errGuardStuck(o.Path)
	}
	if err != nil {
		return nil, explain(o.Path, err)
	}
	defer g.release()
	if st, err = readStatus(o.Path); err != nil || st.State == StateFree {
		return st, err
	}
	judgeLock(st, o.Stale, false)
	if st.State == StateHeld && !force {
		return st, fmt.Errorf("%w: %s", ErrHeld, st.Holder())
	}
	if err := removeIfSame(o.Path, st); err != nil {
		return st, explainClear(o.Path, st, err)
	}
	return st, nil
}
