//go:build linux

package lock

import (
	"bytes"
	"errors"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is what the kernel reports: files of the folder removed or
// renamed away, and the folder itself going. fsnotify cannot be told to
// leave out creations, writes and attribute changes (its Linux mask is
// fixed), and each of those would wake every waiter's process at every
// handoff, for nothing: with 8 contenders, about 16 events times 7 waiters.
const watchMask = unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watch watches k.dir with an inotify instance of its own, read through the
// runtime's poller.
func (k *waker) watch() error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return os.NewSyscallError("inotify_init1", err)
	}
	if _, err := unix.InotifyAddWatch(fd, k.dir, watchMask); err != nil {
		unix.Close(fd)
		return &os.PathError{Op: "inotify_add_watch", Path: k.dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), "inotify")
	k.stop = func() { f.Close() }
	go func() {
		defer close(k.done)
		// Room for many events at once: one read takes all that came
		// since the last.
		buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
		for {
			n, err := f.Read(buf)
			if err != nil {
				if !errors.Is(err, os.ErrClosed) {
					k.lost()
				}
				return
			}
			if k.events(buf[:n]) {
				k.lost()
				return
			}
		}
	}()
	return nil
}

// events hands the events in b on, reporting whether the watch has ended
// (the folder was removed or moved).
func (k *waker) events(b []byte) (ended bool) {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return false
		}
		name := b[unix.SizeofInotifyEvent:end]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		switch {
		case ev.Mask&unix.IN_Q_OVERFLOW != 0:
			k.lost()
		case ev.Mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
			ended = true
		case len(name) > 0:
			k.removed(string(name))
		}
		b = b[end:]
	}
	return ended
}
