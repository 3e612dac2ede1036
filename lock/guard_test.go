package lock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
)

// A guard held by someone else is handed over when they let go, and a wait
// for it ends with its context.
func TestGuardWaitsForItsHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	held, err := takeGuard(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("given up when the context ends", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if g, err := takeGuard(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
			g.release()
			t.Fatalf("takeGuard while held = %v, want the context's deadline", err)
		}
	})

	t.Run("handed over on release", func(t *testing.T) {
		got := make(chan error, 1)
		var g *guard
		go func() {
			var err error
			g, err = takeGuard(context.Background(), path)
			got <- err
		}()
		// The waiter has not got it while it is held: the guard's
		// exclusivity is what every other test relies on, so only a
		// short look here.
		select {
		case err := <-got:
			t.Fatalf("takeGuard returned (%v) while the guard is held", err)
		case <-time.After(20 * time.Millisecond):
		}
		held.release()
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			g.release()
		case <-time.After(10 * time.Second):
			t.Fatal("takeGuard still waiting after the guard was released")
		}
	})

	// The wait given up above has dropped what it got, so the guard is
	// free now.
	waitUntil(t, "the abandoned wait to let go of the guard", func() bool {
		f, err := os.OpenFile(path+guardSuffix, os.O_RDWR, 0)
		if err != nil {
			return false
		}
		defer f.Close()
		ok, err := osfile.TryLock(f)
		if ok {
			osfile.Unlock(f)
		}
		return ok && err == nil
	})
}

// The job's group noted in the liveness file is read by a probe that finds
// the liveness lock free, and not otherwise.
func TestNotedGroupIsReadWhenTheLivenessLockIsFree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	const token = "0123456789abcdef"
	l, err := takeLive(path, token)
	if err != nil {
		t.Fatal(err)
	}
	defer l.release()
	if held, known, group := probeLive(path, token); !held || !known || group != (jobGroup{}) {
		t.Fatalf("probe of a held liveness lock, nothing noted = %v, %v, %v; want held, known, none", held, known, group)
	}
	if err := l.note(jobGroup{id: 4321, since: 1791000000123}); err != nil {
		t.Fatal(err)
	}
	if held, known, group := probeLive(path, token); !held || !known || group != (jobGroup{}) {
		t.Fatalf("probe of a held liveness lock = %v, %v, %v; want held, known, none", held, known, group)
	}
	// The holder is gone (its kernel lock dropped), its file is left.
	if err := osfile.Unlock(l.f); err != nil {
		t.Fatal(err)
	}
	if held, known, group := probeLive(path, token); held || !known || group != (jobGroup{id: 4321, since: 1791000000123}) {
		t.Fatalf("probe of a free liveness lock = %v, %v, %v; want free, known, 4321 since 1791000000123", held, known, group)
	}
	if held, known, group := probeLive(path, "fedcba9876543210"); held || known || group != (jobGroup{}) {
		t.Fatalf("probe of no liveness file = %v, %v, %v; want free, unknown, none", held, known, group)
	}
}
