package lock

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
)

// fakeWaker is a waker with no watch behind it: the test delivers its
// wake-ups.
func fakeWaker() *waker {
	return &waker{c: make(chan struct{}, 1), left: make(chan struct{}, 1), done: make(chan struct{}), stop: func() {}}
}

// deliver sends a wake-up and returns once waitForChange has taken it.
func deliver(t *testing.T, c chan struct{}, returned <-chan bool, what string) {
	t.Helper()
	c <- struct{}{}
	deadline := time.Now().Add(10 * time.Second)
	for len(c) > 0 {
		select {
		case r := <-returned:
			t.Fatalf("waitForChange returned %v before taking %s", r, what)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waitForChange never took %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// stillWaiting proves that waitForChange went back to waiting after the
// wake-ups it was given: it takes one more (on c, which must not end the
// wait either). What that last one makes it do may still be under way when
// stillWaiting returns.
func stillWaiting(t *testing.T, c chan struct{}, returned <-chan bool, what string) {
	t.Helper()
	deliver(t, c, returned, what)
	select {
	case r := <-returned:
		t.Fatalf("waitForChange returned %v on %s", r, what)
	default:
	}
}

func awaitReturn(t *testing.T, returned <-chan bool, why string) {
	t.Helper()
	select {
	case r := <-returned:
		if !r {
			t.Fatalf("waitForChange returned false on %s", why)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("waitForChange did not return on %s", why)
	}
}

// queueOf makes tickets 1..n beside o.Path, held by this process (as live
// waiters' are), and returns them.
func queueOf(t *testing.T, o Options, n int) []*ticket {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	var out []*ticket
	for range n {
		g, err := takeGuard(context.Background(), o.Path)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := takeTicket(g, o, newQueue(o.Path, []string{o.Path}))
		g.release()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tk.drop)
		out = append(out, tk)
	}
	return out
}

// waiting runs waitForChange for ticket seq at position pos, with a poll
// that never fires; the channel delivers what it returns.
func waiting(t *testing.T, ctx context.Context, o Options, seen []*Status, seq uint64, pos int, k *waker) <-chan bool {
	t.Helper()
	poll := time.NewTimer(time.Hour)
	returned := make(chan bool, 1)
	ws := &waitState{q: newQueue(o.Path, []string{o.Path}), queued: true, tk: &ticket{seq: seq}, pos: pos}
	rep := newReporter(ctx, o, lockSet{paths: []string{o.Path}, need: 1}, ws, time.Now())
	go func() { returned <- waitForChange(ctx, o, seen, ws, k, poll, rep) }()
	t.Cleanup(func() { poll.Stop() })
	return returned
}

func TestWaitForChange(t *testing.T) {
	bg := context.Background()

	t.Run("behind the head: releases are ignored, the head leaving ends the wait", func(t *testing.T) {
		o := testOptions(t)
		q, k := queueOf(t, o, 2), fakeWaker()
		returned := waiting(t, bg, o, nil, q[1].seq, 2, k)

		deliver(t, k.c, returned, "a release")
		stillWaiting(t, k.c, returned, "another release")
		q[0].drop() // the head took the lock and left the queue
		deliver(t, k.left, returned, "the head leaving")
		awaitReturn(t, returned, "the head leaving")
	})

	t.Run("behind the head: a waiter behind leaving changes nothing", func(t *testing.T) {
		o := testOptions(t)
		q, k := queueOf(t, o, 3), fakeWaker()
		returned := waiting(t, bg, o, nil, q[1].seq, 2, k)

		q[2].drop()
		deliver(t, k.left, returned, "a waiter behind leaving")
		// Taken only once the last wake-up has been dealt with: the
		// queue may change now.
		stillWaiting(t, k.c, returned, "a release, after a waiter behind left")
		q[0].drop()
		deliver(t, k.left, returned, "the head leaving")
		awaitReturn(t, returned, "the head leaving")
	})

	t.Run("the head: tickets leaving are ignored, a release ends the wait", func(t *testing.T) {
		o := testOptions(t)
		q, k := queueOf(t, o, 2), fakeWaker()
		returned := waiting(t, bg, o, nil, q[0].seq, 1, k)

		q[1].drop()
		deliver(t, k.left, returned, "a ticket leaving")
		stillWaiting(t, k.left, returned, "another ticket leaving")
		deliver(t, k.c, returned, "a release")
		awaitReturn(t, returned, "a release")
	})

	t.Run("behind a head that died: the probe ends the wait", func(t *testing.T) {
		o := testOptions(t)
		q := queueOf(t, o, 2)
		// The head's process is gone: its ticket stays, its kernel lock
		// does not.
		osfile.Unlock(q[0].f)
		returned := waiting(t, bg, o, nil, q[1].seq, 2, fakeWaker())
		awaitReturn(t, returned, "the probe finding the head dead")
	})

	t.Run("the context ends the wait", func(t *testing.T) {
		o := testOptions(t)
		q := queueOf(t, o, 2)
		ctx, cancel := context.WithCancel(bg)
		returned := waiting(t, ctx, o, nil, q[1].seq, 2, fakeWaker())
		cancel()
		select {
		case r := <-returned:
			if r {
				t.Fatal("waitForChange returned true when its context ended")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("waitForChange did not return when its context ended")
		}
	})
}

// With the folder really watched: a waiter behind the head follows the live
// ticket nearest ahead of it, and once it is the head, a release that came
// while it was not watching the folder is not missed.
func TestWaitForChangeWatched(t *testing.T) {
	o := testOptions(t)
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	r, err := Inspect(Options{Path: o.Path, Stale: o.Stale})
	if err != nil || len(r.Locks) != 1 || r.Locks[0].State != StateHeld {
		t.Fatalf("Inspect = %+v, %v; want held", r, err)
	}
	held := r.Locks[0]
	q := queueOf(t, o, 3)
	mine := q[2]
	k, err := newWaker(o.Path, []string{o.Path})
	if err != nil {
		t.Skipf("cannot watch the folder here: %v", err)
	}
	defer k.close()

	returned := waiting(t, context.Background(), o, []*Status{held}, mine.seq, 3, k)
	// The head leaving does not make this waiter the head: the one
	// behind it is still ahead, alive.
	q[0].drop()
	select {
	case r := <-returned:
		t.Fatalf("waitForChange returned %v with a live waiter still ahead", r)
	case <-time.After(50 * time.Millisecond):
	}
	q[1].drop()
	awaitReturn(t, returned, "the last waiter ahead leaving")

	// The head now; the lock is released before it waits again.
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	returned = waiting(t, context.Background(), o, []*Status{held}, mine.seq, 1, k)
	awaitReturn(t, returned, "a release that came before the head watched the folder")
}
