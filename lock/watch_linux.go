//go:build linux

package lock

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dirMask is what the kernel reports of the lock's folder: files removed
// or renamed away, and the folder itself going. fsnotify cannot be told to
// leave out creations, writes and attribute changes (its Linux mask is
// fixed), and each of those would wake the head at every handoff, for
// nothing.
const dirMask = unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// ticketMask is what the kernel reports of the ticket a waiter follows: its
// link count changing (its removal; a touch, at most once per heartbeat,
// too), the file going, or its last writable close: the waiter's open file,
// which holds the ticket's kernel lock, is closed when the waiter ends, if
// killed too. (Probes open it read-only, which reports nothing.)
const ticketMask = unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_CLOSE_WRITE

// holderMask is what the kernel reports of a holder's liveness file: its
// last writable close, which is when its kernel lock is dropped (the holder
// and every process of its job that inherited it have closed or ended).
const holderMask = unix.IN_CLOSE_WRITE

// osWatch is the inotify instance of a waker. Only the head of the queue
// watches the folder; a waiter behind it watches the one ticket it follows
// (see waitForChange), so that a handoff wakes the process that takes the
// lock and the one that becomes the head, not every waiter.
type osWatch struct {
	on       bool // false: no inotify instance (a waker made by hand in tests)
	fd       int
	f        *os.File
	mu       sync.Mutex
	dirWD    int // -1: the folder is not watched
	ticketWD int // -1: no ticket is followed
	ticket   string
	holders  map[int]string // liveness files watched (watchHolders), by watch
}

// watch starts k's inotify instance, read through the runtime's poller,
// watching the folder.
func (k *waker) watch() error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return os.NewSyscallError("inotify_init1", err)
	}
	wd, err := unix.InotifyAddWatch(fd, k.dir, dirMask)
	if err != nil {
		unix.Close(fd)
		return &os.PathError{Op: "inotify_add_watch", Path: k.dir, Err: err}
	}
	k.os.on, k.os.fd, k.os.dirWD, k.os.ticketWD = true, fd, wd, -1
	k.os.f = os.NewFile(uintptr(fd), "inotify")
	k.stop = func() { k.os.f.Close() }
	go func() {
		defer close(k.done)
		// Room for many events at once: one read takes all that came
		// since the last.
		buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
		for {
			n, err := k.os.f.Read(buf)
			if err != nil {
				if !errors.Is(err, os.ErrClosed) {
					k.lost()
				}
				return
			}
			k.events(buf[:n])
		}
	}()
	return nil
}

// events hands the events in b on.
func (k *waker) events(b []byte) {
	k.os.mu.Lock()
	defer k.os.mu.Unlock()
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return
		}
		name := b[unix.SizeofInotifyEvent:end]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		b = b[end:]
		wd := int(ev.Wd)
		switch {
		case ev.Mask&unix.IN_Q_OVERFLOW != 0:
			k.lost()
		case wd == k.os.ticketWD:
			send(k.left)
		case k.os.holders[wd] != "":
			if ev.Mask&unix.IN_IGNORED != 0 {
				delete(k.os.holders, wd) // the file is gone: its removal wakes
				continue
			}
			send(k.c)
		case wd != k.os.dirWD:
			// A watch given up (its IN_IGNORED).
		case ev.Mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
			// The folder itself went: nothing more comes from it.
			k.os.dirWD = -1
			k.lost()
		case len(name) > 0:
			k.removed(string(name))
		}
	}
}

// watchReleases makes sure the folder is watched, reporting whether it was
// not a moment ago (a release in between went unseen: look again).
func (k *waker) watchReleases() (added bool) {
	if k == nil || !k.os.on {
		return false
	}
	k.os.mu.Lock()
	defer k.os.mu.Unlock()
	k.unfollowLocked()
	if k.os.dirWD >= 0 {
		return false
	}
	wd, err := unix.InotifyAddWatch(k.os.fd, k.dir, dirMask)
	if err != nil {
		return true // look, and count on the probe and the poll
	}
	k.os.dirWD = wd
	return true
}

// closes reports whether k reports the last close of the files it
// follows (see ticketMask and watchHolders): waiting needs no probe then.
func (k *waker) closes() bool { return k != nil && k.os.on }

// watchHolders watches the liveness files at paths for their last close,
// instead of those watched before, reporting false when one cannot be
// watched (it is gone, or this user may not read it).
func (k *waker) watchHolders(paths []string) bool {
	if k == nil || !k.os.on {
		return false
	}
	k.os.mu.Lock()
	defer k.os.mu.Unlock()
	keep := make(map[int]string, len(paths))
	ok := true
	for _, p := range paths {
		wd, err := unix.InotifyAddWatch(k.os.fd, p, holderMask)
		if err != nil {
			ok = false
			continue
		}
		keep[wd] = p
	}
	for wd := range k.os.holders {
		if keep[wd] == "" {
			unix.InotifyRmWatch(k.os.fd, uint32(wd))
		}
	}
	k.os.holders = keep
	return ok
}

// follow watches the ticket at path instead of the folder, reporting false
// if the ticket is already gone. A ticket this user may not read (another
// user's mode) cannot be watched: the folder then stays watched, and its
// removal is seen there (a waiter killed leaves it until the head prunes
// it).
func (k *waker) follow(path string) bool {
	if k == nil || !k.os.on {
		_, err := os.Stat(path)
		return err == nil
	}
	k.os.mu.Lock()
	defer k.os.mu.Unlock()
	for wd := range k.os.holders {
		unix.InotifyRmWatch(k.os.fd, uint32(wd))
	}
	k.os.holders = nil
	if path != k.os.ticket || k.os.ticketWD < 0 {
		k.unfollowLocked()
		wd, err := unix.InotifyAddWatch(k.os.fd, path, ticketMask)
		if errors.Is(err, unix.ENOENT) {
			return false
		}
		if err != nil {
			if k.os.dirWD < 0 {
				if wd, err := unix.InotifyAddWatch(k.os.fd, k.dir, dirMask); err == nil {
					k.os.dirWD = wd
				}
			}
			_, err := os.Lstat(path)
			return err == nil
		}
		k.os.ticketWD, k.os.ticket = wd, path
	}
	if k.os.dirWD >= 0 {
		unix.InotifyRmWatch(k.os.fd, uint32(k.os.dirWD))
		k.os.dirWD = -1
	}
	return true
}

func (k *waker) unfollowLocked() {
	if k.os.ticketWD >= 0 {
		unix.InotifyRmWatch(k.os.fd, uint32(k.os.ticketWD))
		k.os.ticketWD, k.os.ticket = -1, ""
	}
}
