package lock

import (
	"path/filepath"
	"strings"
)

// waker turns changes in the lock's folder into wake-ups for a waiter: one
// of the lock files or their liveness files removed or renamed away
// (released, cleared, a job whose record was cleared ending), or a
// sharer's sidecar (it left), for the head of the queue; a ticket removed
// (a waiter served or gone), for the waiters behind it. Everything else in the folder (records written,
// tickets taken or touched, liveness files) wakes nobody. Where the folder
// cannot be watched (no inotify instance left, some network filesystems)
// the waker is nil and the waiter polls. The folder is watched by
// watch_linux.go (inotify, told to report removals only, and only for the
// head; a waiter behind it follows one ticket) or watch_other.go
// (fsnotify).
type waker struct {
	dir     string
	locks   map[string]bool
	lives   []string // path prefixes of the locks' liveness files and sidecars
	tickets string   // path prefix of the queue's tickets
	// plainLock, for a waiter for a plain lock, is its path: the removal of
	// any device's lock beside it, or of their liveness files, wakes it.
	plainLock string
	c         chan struct{}
	left      chan struct{}
	done      chan struct{} // closed when the watch has stopped
	stop      func()        // stops the watch
	os        osWatch       // what the watch of this OS keeps
}

// newWaker watches the folder of lockPath (the queue's path) for the
// removal of any of locks and of tickets, and of what keeps them from
// being taken (see cover.go): for the lock at lockPath itself, every
// device's lock beside it; for devices, the lock at lockPath.
func newWaker(lockPath string, locks []string) (*waker, error) {
	set := make(map[string]bool, len(locks)+1)
	var lives []string
	for _, l := range locks {
		set[l] = true
		// A sharer leaving removes its sidecar: its budget is free
		// for a waiter whose admission it held up.
		lives = append(lives, l+liveSuffix, l+shareSuffix)
	}
	plain := len(locks) == 1 && locks[0] == lockPath
	if !plain {
		set[lockPath] = true
		lives = append(lives, lockPath+liveSuffix)
	}
	k := &waker{
		dir: filepath.Dir(lockPath), locks: set, lives: lives, tickets: lockPath + ticketSuffix,
		c: make(chan struct{}, 1), left: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if plain {
		k.plainLock = lockPath
	}
	if err := k.watch(); err != nil {
		return nil, err
	}
	return k, nil
}

// removed is told of each file of the folder removed or renamed away.
func (k *waker) removed(name string) {
	path := filepath.Join(k.dir, name)
	switch {
	case k.locks[path]:
		send(k.c)
	case strings.HasPrefix(path, k.tickets):
		send(k.left)
	case k.plainLock != "" && besideLock(k.plainLock, path):
		send(k.c)
	default:
		for _, p := range k.lives {
			if strings.HasPrefix(path, p) {
				send(k.c)
				return
			}
		}
	}
}

// lost is told when events were lost (a queue overflow) or the watch ended
// on its own (the folder removed): every waiter looks.
func (k *waker) lost() {
	send(k.c)
	send(k.left)
}

// send delivers a wake-up on c without blocking; one pending is enough.
func send(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// C delivers a wake-up when a lock is released; nil (never ready) on a nil
// waker.
func (k *waker) C() <-chan struct{} {
	if k == nil {
		return nil
	}
	return k.c
}

// Left delivers a wake-up when a ticket leaves the queue; nil (never ready)
// on a nil waker.
func (k *waker) Left() <-chan struct{} {
	if k == nil {
		return nil
	}
	return k.left
}

// close stops watching and waits for the watch's goroutine to end.
func (k *waker) close() {
	if k == nil {
		return
	}
	k.stop()
	<-k.done
}
