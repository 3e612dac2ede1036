//go:build !linux

package lock

import (
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

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
