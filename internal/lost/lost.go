// Package lost is how a held lock tells its holder that it may no longer
// be held: a channel closed once, and why. Every backend's held lock (lock,
// etcdlock, the etcd helper's client) keeps one and offers its Lost and
// Reason as its own Lost and LostReason; Mark stays with the backend.
package lost

import "sync"

// Signal is a lock's lost signal: not given until Mark.
type Signal struct {
	once sync.Once
	mu   sync.Mutex
	why  error
	c    chan struct{}
}

// New returns a signal not yet given.
func New() *Signal { return &Signal{c: make(chan struct{})} }

// Lost is closed when the lock may no longer be ours. Someone else may hold
// it from then on; the caller should stop using what it guards.
func (l *Signal) Lost() <-chan struct{} { return l.c }

// Reason says why Lost was closed; nil while it is not.
func (l *Signal) Reason() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.why
}

// Mark closes Lost with why, the first time it is called, after
// announce (if not nil): what the holder says of it comes before what
// anyone told by Lost does.
func (l *Signal) Mark(why error, announce func()) {
	l.once.Do(func() {
		l.mu.Lock()
		l.why = why
		l.mu.Unlock()
		if announce != nil {
			announce()
		}
		close(l.c)
	})
}
