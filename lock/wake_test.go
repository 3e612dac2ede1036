package lock

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// wakeWait is how long a test waits for a wake-up that must come.
const wakeWait = 10 * time.Second

func awaitWake(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(wakeWait):
		t.Fatalf("no wake-up for %s within %s", what, wakeWait)
	}
}

func notPending(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
		t.Fatalf("unexpected wake-up: %s", what)
	default:
	}
}

// Events reach a reader in the order they happened: each step below ends
// with a wake-up that must come, and the channel that must stay quiet is
// checked after it, so that an event it should have ignored would already
// have been delivered.
func TestWakerWakesOnRemovalsOnly(t *testing.T) {
	dir := t.TempDir()
	lockPath := filepath.Join(dir, "gpu.lock")
	ticket := ticketPath(lockPath, 1)
	ticket2 := ticketPath(lockPath, 2)
	live := lockPath + liveSuffix + "0123456789abcdef"
	other := filepath.Join(dir, "other.lock"+liveSuffix+"0123456789abcdef")
	sidecar := sharePath(lockPath, "fedcba9876543210")
	for _, p := range []string{lockPath, ticket, ticket2, live, other, sidecar} {
		if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k, err := newWaker(lockPath, []string{lockPath})
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()

	steps := []struct {
		name    string
		do      func() error
		want    <-chan struct{}
		quiet   <-chan struct{}
		whyQuit string
	}{
		{
			name: "lock written, touched and re-created beside; a ticket removed",
			do: func() error {
				now := time.Now()
				return firstErr(
					os.WriteFile(lockPath, []byte(`{"pid":1}`), 0o644),
					os.Chtimes(lockPath, now, now),
					os.WriteFile(lockPath+".tmp-1-abcdef", []byte("{}"), 0o644),
					os.Remove(other),
					os.Remove(ticket),
				)
			},
			want: k.Left(), quiet: k.C(), whyQuit: "a release for writes, a touch or another file's removal",
		},
		{
			name: "a liveness file removed (the job of a cleared holder ended)",
			do:   func() error { return os.Remove(live) },
			want: k.C(), quiet: k.Left(), whyQuit: "a ticket leaving for a liveness file's removal",
		},
		{
			name: "a new ticket taken; the lock renamed away (released)",
			do: func() error {
				return firstErr(
					os.WriteFile(ticketPath(lockPath, 3), []byte("{}"), 0o644),
					os.Rename(lockPath, lockPath+".stale-1-abcdef"),
				)
			},
			want: k.C(), quiet: k.Left(), whyQuit: "a ticket leaving for a ticket taken",
		},
		{
			name: "the lock created again and removed (cleared)",
			do: func() error {
				return firstErr(os.WriteFile(lockPath, []byte("{}"), 0o644), os.Remove(lockPath))
			},
			want: k.C(), quiet: k.Left(), whyQuit: "a ticket leaving for the lock's removal",
		},
		{
			name: "a sharer's sidecar removed (it left: its budget is free)",
			do:   func() error { return os.Remove(sidecar) },
			want: k.C(), quiet: k.Left(), whyQuit: "a ticket leaving for a sidecar's removal",
		},
		{
			name: "a ticket renamed away",
			do:   func() error { return os.Rename(ticket2, filepath.Join(dir, "elsewhere")) },
			want: k.Left(), quiet: k.C(), whyQuit: "a release for a ticket leaving",
		},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		awaitWake(t, s.want, s.name)
		notPending(t, s.quiet, s.whyQuit)
	}
}

func TestNilWakerNeverWakes(t *testing.T) {
	var k *waker
	if k.C() != nil || k.Left() != nil {
		t.Fatal("a nil waker's channels must be nil (never ready)")
	}
	k.close()
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
