// Package lost is how a held lock tells its holder that it may no longer
// be held: a channel closed once, and why. Every backend's held lock (lock,
// etcdlock, the etcd helper's client) keeps one and offers its Lost and
// Reason as its own Lost and LostReason; Mark stays with the backend.
package lost

import (
	"context"
	"sync"
)

// Signal is a lock's lost signal: not given until Mark. It is a context
// cancelled with the reason as its cause.
type Signal struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// New returns a signal not yet given.
func New() *Signal {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Signal{ctx: ctx, cancel: cancel}
}

// Lost is closed when the lock may no longer be ours. Someone else may hold
// it from then on; the caller should stop using what it guards.
func (l *Signal) Lost() <-chan struct{} { return l.ctx.Done() }

// Reason says why Lost was closed; nil while it is not.
func (l *Signal) Reason() error { return context.Cause(l.ctx) }

// Mark closes Lost with why (nil reads as context.Canceled), the first time
// it is called, after announce (if not nil): what the holder says of it
// comes before what anyone told by Lost does.
func (l *Signal) Mark(why error, announce func()) {
	l.once.Do(func() {
		if announce != nil {
			announce()
		}
		l.cancel(why)
	})
}
