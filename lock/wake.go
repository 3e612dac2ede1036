package lock

import (
	"path/filepath"
	"strings"

	"github.com/fsnotify/fsnotify"
)

// waker turns changes in the lock's folder into wake-ups for a waiter: the
// lock file removed or renamed away (released, cleared), a ticket removed (a
// waiter ahead left). Where the folder cannot be watched (no inotify left,
// some network filesystems) it is nil and the waiter polls.
type waker struct {
	w       *fsnotify.Watcher
	locks   map[string]bool
	tickets string
	c       chan wake
	done    chan struct{}
}

// wake says what changed.
type wake int

const (
	wakeLock   wake = iota + 1 // the lock file went away
	wakeTicket                 // a ticket went away
)

// newWaker watches the folder of lockPath (the queue's anchor) for the
// removal of any of locks or of a ticket.
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
	k := &waker{
		w:       w,
		locks:   set,
		tickets: lockPath + TicketSuffix,
		c:       make(chan wake, 1),
		done:    make(chan struct{}),
	}
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
			if !ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Rename) {
				continue
			}
			var what wake
			switch {
			case k.locks[ev.Name]:
				what = wakeLock
			case strings.HasPrefix(ev.Name, k.tickets):
				what = wakeTicket
			default:
				continue
			}
			k.send(what)
		case _, ok := <-k.w.Errors:
			if !ok {
				return
			}
			// An overflow lost events: wake to look.
			k.send(wakeLock)
		}
	}
}

// send delivers a wake-up without blocking; a lock wake-up replaces a
// pending ticket one, since it matters more.
func (k *waker) send(what wake) {
	for {
		select {
		case k.c <- what:
			return
		default:
		}
		select {
		case old := <-k.c:
			if old == wakeLock {
				what = wakeLock
			}
		default:
		}
	}
}

// C delivers wake-ups; nil (never ready) on a nil waker.
func (k *waker) C() <-chan wake {
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
