package lock

import (
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// waker turns changes in the lock's folder into wake-ups for a waiter: one
// of the lock files removed or renamed away (released, cleared). Tickets
// coming and going wake nobody: a waiter behind the head has nothing to do
// until the lock is free again, and waking them all at each handoff would
// only crowd the guard while the head takes the lock. Where the folder
// cannot be watched (no inotify instance left, some network filesystems)
// the waker is nil and the waiter polls.
type waker struct {
	w     *fsnotify.Watcher
	locks map[string]bool
	c     chan struct{}
	done  chan struct{}
}

// newWaker watches the folder of lockPath (the queue's anchor) for the
// removal of any of locks.
func newWaker(lockPath string, locks []string) (*waker, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(filepath.Dir(lockPath)); err != nil {
		w.Close()
		return nil, err
	}
	set := make(map[string]bool, len(locks))
	for _, l := range locks {
		set[l] = true
	}
	k := &waker{w: w, locks: set, c: make(chan struct{}, 1), done: make(chan struct{})}
	go k.run()
	return k, nil
}

func (k *waker) run() {
	defer close(k.done)
	for {
		select {
		case ev, ok := <-k.w.Events:
			if !ok {
				return
			}
			if (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) && k.locks[ev.Name] {
				k.send()
			}
		case _, ok := <-k.w.Errors:
			if !ok {
				return
			}
			// An overflow lost events: wake to look.
			k.send()
		}
	}
}

// send delivers a wake-up without blocking; one pending is enough.
func (k *waker) send() {
	select {
	case k.c <- struct{}{}:
	default:
	}
}

// C delivers wake-ups; nil (never ready) on a nil waker.
func (k *waker) C() <-chan struct{} {
	if k == nil {
		return nil
	}
	return k.c
}

// close stops watching and waits for the watcher's goroutine to end.
func (k *waker) close() {
	if k == nil {
		return
	}
	k.w.Close()
	<-k.done
}
