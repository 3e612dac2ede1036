//go:build linux

package lock

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// With the folder watched, waiting is event-driven: no probe runs, and a
// waiter ahead that dies (its ticket's open file closed by its end, the
// ticket left behind) ends the wait of the one behind it at once.
func TestWaiterBehindADeadWaiterWakesOnItsClose(t *testing.T) {
	o := testOptions(t)
	q := queueOf(t, o, 2)
	k, err := newWaker(o.Path, []string{o.Path})
	if err != nil {
		t.Skipf("cannot watch the folder here: %v", err)
	}
	defer k.close()
	if !k.closes() {
		t.Fatal("an inotify waker does not report closes")
	}
	returned := waiting(t, context.Background(), o, nil, q[1].seq, 2, k)
	testsupport.StillBlocked(t, 300*time.Millisecond, "the wait, while the waiter ahead lives", func() bool { return len(returned) > 0 })
	// The waiter ahead is killed: its ticket stays, its file is closed.
	q[0].f.Close()
	awaitReturn(t, returned, "the dead waiter's ticket closed")
}

// The head wakes when its holder's liveness file is closed for the last
// time (the holder and its job gone), without a probe.
func TestHeadWakesOnTheHoldersLastClose(t *testing.T) {
	o := testOptions(t)
	token := "0123456789abcdef"
	writeLock(t, o.Path, os.Getpid(), token)
	live, err := osfile.CreateExcl(livePath(o.Path, token), osfile.Locked)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := osfile.TryLock(live); !ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	r, err := Inspect(Options{Path: o.Path})
	if err != nil || r.Locks[0].State != StateHeld {
		t.Fatalf("Inspect = %+v, %v; want held", r, err)
	}
	q := queueOf(t, o, 1)
	k, err := newWaker(o.Path, []string{o.Path})
	if err != nil {
		t.Skipf("cannot watch the folder here: %v", err)
	}
	defer k.close()
	returned := waiting(t, context.Background(), o, r.Locks, q[0].seq, 1, k)
	testsupport.StillBlocked(t, 300*time.Millisecond, "the wait, while the holder lives", func() bool { return len(returned) > 0 })
	// Probes by others open it read-only: they wake nobody.
	if held, known, _ := probeLiveFile(livePath(o.Path, token)); !held || !known {
		t.Fatalf("probe: held %v, known %v", held, known)
	}
	testsupport.StillBlocked(t, 100*time.Millisecond, "the wait, after a probe", func() bool { return len(returned) > 0 })
	live.Close() // the holder and its job end
	awaitReturn(t, returned, "the holder's liveness file closed")
}
