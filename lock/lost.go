package lock

import "sync"

// LostSignal is how a held lock tells that it may no longer be its
// holder's: a channel closed once, and why. Backends embed it in what they
// return from Acquire (Held, etcdlock.Held).
type LostSignal struct {
	once sync.Once
	mu   sync.Mutex
	why  error
	c    chan struct{}
}

// NewLostSignal returns a signal not yet given.
func NewLostSignal() *LostSignal { return &LostSignal{c: make(chan struct{})} }

// Lost is closed when the lock may no longer be ours. Someone else may hold
// it from then on; the caller should stop using what it guards.
func (l *LostSignal) Lost() <-chan struct{} { return l.c }

// LostReason says why Lost was closed; nil while it is not.
func (l *LostSignal) LostReason() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.why
}

// MarkLost closes Lost with why, the first time it is called, after
// announce (if not nil): what the holder says of it comes before what
// anyone told by Lost does.
func (l *LostSignal) MarkLost(why error, announce func()) {
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
