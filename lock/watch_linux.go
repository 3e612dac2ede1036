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
// too), or the file going.
const ticketMask = unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

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

// follow watches the ticket at path instead of the folder, reporting false
// if the ticket is already gone.
func (k *waker) follow(path string) bool {
	if k == nil || !k.os.on {
		_, err := os.Stat(path)
		return err == nil
	}
	k.os.mu.Lock()
	defer k.os.mu.Unlock()
	if k.os.dirWD >= 0 {
		unix.InotifyRmWatch(k.os.fd, uint32(k.os.dirWD))
		k.os.dirWD = -1
	}
	if path == k.os.ticket && k.os.ticketWD >= 0 {
		return true
	}
	k.unfollowLocked()
	wd, err := unix.InotifyAddWatch(k.os.fd, path, ticketMask)
	if err != nil {
		return false
	}
	k.os.ticketWD, k.os.ticket = wd, path
	return true
}

func (k *waker) unfollowLocked() {
	if k.os.ticketWD >= 0 {
		unix.InotifyRmWatch(k.os.fd, uint32(k.os.ticketWD))
		k.os.ticketWD, k.os.ticket = -1, ""
	}
}
