//go:build !linux

package lock

import (
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// osWatch has nothing of its own outside Linux: the folder is watched with
// fsnotify, which reports every ticket's removal, for every waiter.
type osWatch struct{}

// watch watches k.dir with fsnotify, passing on removals and renames.
func (k *waker) watch() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := w.Add(k.dir); err != nil {
		w.Close()
		return err
	}
	k.stop = func() { w.Close() }
	go func() {
		defer close(k.done)
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
					k.removed(filepath.Base(ev.Name))
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
				k.lost()
			}
		}
	}()
	return nil
}

// watchReleases: the folder is always watched here.
func (k *waker) watchReleases() (added bool) { return false }

// follow reports whether the ticket at path is still there; its removal
// comes with the folder's events.
func (k *waker) follow(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// closes: fsnotify does not report closes; waiters probe.
func (k *waker) closes() bool { return false }

// watchHolders: liveness files are probed here.
func (k *waker) watchHolders([]string) bool { return false }
