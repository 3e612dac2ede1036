package etcdhelper

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/lost"
	"github.com/gpuexec/gpuexec/lock"
)

// held is a lock held by a helper on our behalf.
type held struct {
	c    *conn
	path string
	info lock.Info
	log  hclog.Logger

	mu       sync.Mutex // guards info
	released atomic.Bool
	lost     *lost.Signal
}

func newHeld(c *conn, o lock.Options, info *lock.Info) *held {
	h := &held{c: c, path: o.Path, log: o.Logger, lost: lost.New()}
	if h.log == nil {
		h.log = hclog.NewNullLogger()
	}
	if info != nil {
		h.info = *info
	}
	c.lostMu.Lock()
	c.onLost = h.markLost
	c.lostMu.Unlock()
	select {
	case <-c.done: // the helper is already gone
		h.markLost(c.gone().Error())
	default:
	}
	return h
}

func (h *held) markLost(reason string) {
	if h.released.Load() {
		return
	}
	h.lost.Mark(errors.New(reason), func() {
		select {
		case <-h.c.done:
			// The helper could not say so itself.
			h.log.Error("GPU lock lost", "path", h.path, "reason", reason)
		default:
		}
	})
}

func (h *held) Path() string          { return h.path }
func (h *held) Lost() <-chan struct{} { return h.lost.Lost() }
func (h *held) LostReason() error     { return h.lost.Reason() }

func (h *held) Info() lock.Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.info
}

// NoteChild tells the helper the job's process group, pgid, the moment the
// job is started: a helper whose user dies without releasing keeps the lock
// while a process of that group lives. It waits for no answer (the request
// is in the helper's input once NoteChild returns) and writes nothing to
// etcd; RecordChild puts the group into the record, for status.
func (h *held) NoteChild(pgid int) error {
	return h.c.send(request{Op: "note", PGID: pgid})
}

// LiveFiles is the write end of the helper's liveness pipe, for the job to
// inherit (exec.Cmd.ExtraFiles on Unix): a helper whose user dies without
// releasing keeps the lock while any process holds it open. None where
// the OS has no liveness pipe (Windows). Do not close it; Release does.
func (h *held) LiveFiles() []*os.File {
	if h.c.live == nil {
		return nil
	}
	return []*os.File{h.c.live}
}

func (h *held) RecordChild(pgid int) error {
	if err := h.c.send(request{Op: "child", PGID: pgid}); err != nil {
		return err
	}
	ev, err := h.c.next(callWait)
	switch {
	case err != nil:
		return err
	case ev.Event == "ok":
		h.mu.Lock()
		h.info.ChildPGID = pgid
		h.mu.Unlock()
		return nil
	default:
		return answerError(ev)
	}
}

func (h *held) Release() error {
	if !h.released.CompareAndSwap(false, true) {
		return nil
	}
	defer h.c.close()
	if err := h.c.send(request{Op: "release"}); err != nil {
		return fmt.Errorf("lock: release: the %s helper is gone; the lock frees itself when its lease expires: %w", Name, err)
	}
	ev, err := h.c.next(callWait)
	switch {
	case errors.As(err, new(*lateError)):
		return fmt.Errorf("lock: release: %w; the lock frees itself when its lease expires", h.c.late(err, "answer to its release"))
	case err != nil:
		return fmt.Errorf("lock: release: %w", err)
	case ev.Event != "released":
		return answerError(ev)
	case ev.Error != "":
		return errors.New(ev.Error)
	}
	return nil
}
