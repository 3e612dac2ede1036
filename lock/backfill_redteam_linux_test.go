package lock

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// Where the folder's watch cannot be added back (inotify_add_watch fails:
// ENOSPC once the user's max_user_watches are taken), awaitAdmission
// returns at once, every time: the admission wait spins, asking
// AdmitShare as fast as it answers.
func TestRedteamAwaitAdmissionSpinsWhenTheWatchCannotBeAdded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	wk, err := newWaker(path, []string{path})
	if err != nil {
		t.Skip(err)
	}
	defer wk.close()
	if !wk.closes() {
		t.Skip("no inotify")
	}
	// The folder's watch dropped (as a waiter behind the head drops it)
	// and cannot be added back.
	wk.os.mu.Lock()
	fd := wk.os.fd
	wk.os.fd = -1
	wk.os.dirWD = -1
	wk.os.mu.Unlock()
	defer func() { wk.os.mu.Lock(); wk.os.fd = fd; wk.os.mu.Unlock() }()
	ws := &waitState{q: newQueue(path, []string{path})}
	rep := &reporter{timer: time.NewTimer(time.Hour)}
	poll := time.NewTimer(time.Hour)
	start := time.Now()
	n := 0
	for time.Since(start) < 500*time.Millisecond && n < 1000 {
		if !ws.awaitAdmission(context.Background(), poll, rep, wk) {
			t.Fatal("ended")
		}
		n++
	}
	if n > 2 {
		t.Fatalf("awaitAdmission returned %d times in %s with nothing changed", n, time.Since(start).Round(time.Millisecond))
	}
}
