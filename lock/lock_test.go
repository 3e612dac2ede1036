package lock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/osfile"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// testOptions are fast options on a lock in a fresh temp dir.
func testOptions(t *testing.T) Options {
	t.Helper()
	return Options{
		Path:      filepath.Join(t.TempDir(), "sub", "gpu.lock"),
		Owner:     "test",
		Slug:      t.Name(),
		Poll:      5 * time.Millisecond,
		Heartbeat: time.Hour,
		Stale:     2 * time.Hour,
	}
}

// deadPID is the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int { return testsupport.DeadPID(t) }

// writeLock writes a seed-format record by hand, as the Node tool would.
func writeLock(t *testing.T, path string, pid int, token string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	rec := fmt.Sprintf(`{"pid":%d,"acquiredAt":"2026-10-12T12:18:03.512Z","owner":"channels","slug":"ep12","token":"%s"}`, pid, token)
	if err := os.WriteFile(path, []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// leftovers lists files beside the lock other than the lock and its guard.
func leftovers(t *testing.T, path string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	var odd []string
	for _, e := range ents {
		if n := e.Name(); n != filepath.Base(path) && n != filepath.Base(path)+guardSuffix {
			odd = append(odd, n)
		}
	}
	return odd
}

// contended reports whether TryAcquire's result is contention: no lock,
// and a *WaitError wrapping ErrHeld.
func contended(h *Held, err error) bool {
	var werr *WaitError
	return h == nil && errors.As(err, &werr) && errors.Is(err, ErrHeld)
}

func TestAcquireRelease(t *testing.T) {
	o := testOptions(t)
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	info, err := parseRecord([]byte(mustRead(t, o.Path)))
	if err != nil {
		t.Fatal(err)
	}
	if info.PID != os.Getpid() || info.Token != h.Info().Token || info.Owner != "test" || info.Slug != t.Name() {
		t.Fatalf("record %+v does not match holder %+v", info, h.Info())
	}
	if h2, err := TryAcquire(o); !contended(h2, err) {
		t.Fatalf("TryAcquire on a held lock = %v, %v; want nil, a WaitError wrapping ErrHeld", h2, err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(o.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file still there after Release: %v", err)
	}
	if err := h.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if odd := leftovers(t, o.Path); len(odd) > 0 {
		t.Fatalf("left behind: %v", odd)
	}
	h2, err := TryAcquire(o)
	if h2 == nil || err != nil {
		t.Fatalf("TryAcquire on a free lock = %v, %v", h2, err)
	}
	h2.Release()
}

func TestAcquireWaitsAndTimesOut(t *testing.T) {
	o := testOptions(t)
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = Acquire(ctx, o)
	var werr *WaitError
	if !errors.As(err, &werr) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a held lock: %v; want a WaitError wrapping DeadlineExceeded", err)
	}
	if hs := werr.Holder(); hs == nil || hs.Info == nil || hs.Info.Token != h.Info().Token {
		t.Fatalf("WaitError names holder %+v, want ours", hs)
	}
	if !strings.Contains(err.Error(), "test/"+t.Name()) {
		t.Fatalf("error %q does not name the holder", err)
	}
}

func TestAcquireGetsLockWhenReleased(t *testing.T) {
	o := testOptions(t)
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Held)
	go func() {
		h2, err := Acquire(context.Background(), o)
		if err != nil {
			t.Error(err)
		}
		got <- h2
	}()
	select {
	case <-got:
		t.Fatal("second Acquire succeeded while the lock was held")
	case <-time.After(30 * time.Millisecond):
	}
	h.Release()
	h2 := <-got
	if h2 == nil {
		t.Fatal("no second holder")
	}
	h2.Release()
}

func TestAcquireClearsStale(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, path string)
		reason  string
	}{
		{"dead pid", func(t *testing.T, path string) { writeLock(t, path, deadPID(t), "0123456789abcdef") }, "is gone"},
		{"old heartbeat, live pid", func(t *testing.T, path string) {
			writeLock(t, path, os.Getpid(), "0123456789abcdef")
			old := time.Now().Add(-3 * time.Hour)
			os.Chtimes(path, old, old)
		}, "no heartbeat"},
		{"old empty file", func(t *testing.T, path string) {
			os.MkdirAll(filepath.Dir(path), 0o755)
			os.WriteFile(path, nil, 0o644)
			old := time.Now().Add(-time.Minute)
			os.Chtimes(path, old, old)
		}, "no valid record"},
		{"old truncated record", func(t *testing.T, path string) {
			os.MkdirAll(filepath.Dir(path), 0o755)
			os.WriteFile(path, []byte(`{"pid":12,"acquiredAt":"20`), 0o644)
			old := time.Now().Add(-time.Minute)
			os.Chtimes(path, old, old)
		}, "no valid record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions(t)
			var logs strings.Builder
			o.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
			tt.prepare(t, o.Path)
			h, err := TryAcquire(o)
			if h == nil || err != nil {
				t.Fatalf("TryAcquire over a stale lock = %v, %v", h, err)
			}
			if !strings.Contains(logs.String(), "cleared stale GPU lock") || !strings.Contains(logs.String(), tt.reason) {
				t.Fatalf("log does not record the clearing with reason %q:\n%s", tt.reason, logs.String())
			}
			if err := h.Release(); err != nil {
				t.Fatal(err)
			}
			if odd := leftovers(t, o.Path); len(odd) > 0 {
				t.Fatalf("left behind: %v", odd)
			}
		})
	}
}

func TestFreshEmptyLockIsWaitedFor(t *testing.T) {
	o := testOptions(t)
	os.MkdirAll(filepath.Dir(o.Path), 0o755)
	if err := os.WriteFile(o.Path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if h, err := TryAcquire(o); !contended(h, err) {
		t.Fatalf("TryAcquire over a lock being written = %v, %v; want nil, a WaitError wrapping ErrHeld", h, err)
	}
	if mustRead(t, o.Path) != "" {
		t.Fatal("the lock being written was touched")
	}
}

func TestReleaseLeavesAnotherHoldersLock(t *testing.T) {
	o := testOptions(t)
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	// Someone judged us stale and took the lock.
	writeLock(t, o.Path, os.Getpid(), "fedcba9876543210")
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(mustRead(t, o.Path), "fedcba9876543210") {
		t.Fatal("Release removed another holder's lock")
	}
}

func TestRemoveIfSamePutsBackAnotherLock(t *testing.T) {
	o := testOptions(t)
	writeLock(t, o.Path, deadPID(t), "1111111111111111")
	judged, err := readStatus(o.Path)
	if err != nil {
		t.Fatal(err)
	}
	// Between judging and clearing, the lock was released and re-taken.
	writeLock(t, o.Path, os.Getpid(), "2222222222222222")
	if err := removeIfSame(o.Path, judged); !errors.Is(err, errChanged) {
		t.Fatalf("removeIfSame on a replaced lock: %v, want errChanged", err)
	}
	if !strings.Contains(mustRead(t, o.Path), "2222222222222222") {
		t.Fatal("the new lock was not put back")
	}
	if odd := leftovers(t, o.Path); len(odd) > 0 {
		t.Fatalf("left behind: %v", odd)
	}
	// Already gone: someone else cleared it first.
	os.Remove(o.Path)
	if err := removeIfSame(o.Path, judged); err != nil {
		t.Fatalf("removeIfSame on a missing lock: %v", err)
	}
}

func TestRenameNoReplaceNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("a"), 0o644)
	os.WriteFile(b, []byte("b"), 0o644)
	if err := osfile.RenameNoReplace(a, b); !errors.Is(err, os.ErrExist) {
		t.Fatalf("osfile.RenameNoReplace over an existing file: %v", err)
	}
	if mustRead(t, b) != "b" || mustRead(t, a) != "a" {
		t.Fatal("files changed")
	}
	os.Remove(b)
	if err := osfile.RenameNoReplace(a, b); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) || mustRead(t, b) != "a" {
		t.Fatal("rename did not move the file")
	}
}

func TestHeartbeatTouchesAndDetectsLoss(t *testing.T) {
	o := testOptions(t)
	o.Heartbeat = 5 * time.Millisecond
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	old := time.Now().Add(-time.Hour)
	os.Chtimes(o.Path, old, old)
	deadline := time.Now().Add(10 * time.Second)
	for {
		fi, err := os.Stat(o.Path)
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(fi.ModTime()) < time.Minute {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("heartbeat did not touch the lock")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-h.Lost():
		t.Fatal("lost while still ours")
	default:
	}
	writeLock(t, o.Path, os.Getpid(), "fedcba9876543210")
	select {
	case <-h.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost not closed after the lock was replaced")
	}
	if !errors.Is(h.LostReason(), errNotOurs) {
		t.Fatalf("LostReason = %v", h.LostReason())
	}
	// The heartbeat must not touch the other holder's lock.
	os.Chtimes(o.Path, old, old)
	h.Release()
	if fi, _ := os.Stat(o.Path); time.Since(fi.ModTime()) < time.Minute {
		t.Fatal("another holder's lock was touched")
	}
}

func TestRecordChild(t *testing.T) {
	o := testOptions(t)
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.RecordChild(4321); err != nil {
		t.Fatal(err)
	}
	info, err := parseRecord([]byte(mustRead(t, o.Path)))
	if err != nil || info.ChildPGID != 4321 || info.Token != h.Info().Token {
		t.Fatalf("record after RecordChild: %+v, %v", info, err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if odd := leftovers(t, o.Path); len(odd) > 0 {
		t.Fatalf("left behind: %v", odd)
	}
}

func TestWithLockReleasesOnErrorAndPanic(t *testing.T) {
	o := testOptions(t)
	boom := errors.New("boom")
	err := WithLock(context.Background(), o, func(ctx context.Context) error {
		if _, err := os.Stat(o.Path); err != nil {
			t.Errorf("lock not held inside WithLock: %v", err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WithLock = %v, want fn's error", err)
	}
	if _, err := os.Stat(o.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("lock kept after fn failed")
	}
	func() {
		defer func() { recover() }()
		WithLock(context.Background(), o, func(context.Context) error { panic("render crashed") })
	}()
	if _, err := os.Stat(o.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("lock kept after fn panicked")
	}
}

// TestManyWaitersOneHolder has goroutines contend on one lock, each taking
// a non-blocking kernel lock on a separate truth file inside its critical
// section: a failure to get it is an overlap.
func TestManyWaitersOneHolder(t *testing.T) {
	o := testOptions(t)
	truth := filepath.Join(t.TempDir(), "truth")
	workers, rounds := 8, 25
	if testing.Short() {
		workers, rounds = 4, 5
	}
	var overlaps, sections atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			oo := o
			oo.Slug = fmt.Sprint("w", w)
			for range rounds {
				err := WithLock(context.Background(), oo, func(context.Context) error {
					f, err := os.OpenFile(truth, os.O_RDWR|os.O_CREATE, 0o644)
					if err != nil {
						return err
					}
					defer f.Close()
					ok, err := osfile.TryLock(f)
					if err != nil {
						return err
					}
					if !ok {
						overlaps.Add(1)
						return nil
					}
					sections.Add(1)
					time.Sleep(100 * time.Microsecond)
					return osfile.Unlock(f)
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 || sections.Load() != int64(workers*rounds) {
		t.Fatalf("overlaps = %d, sections = %d of %d", overlaps.Load(), sections.Load(), workers*rounds)
	}
	if odd := leftovers(t, o.Path); len(odd) > 0 {
		t.Fatalf("left behind: %v", odd)
	}
}

// TestStaleStampede has many waiters judge the same stale lock at once:
// exactly one may win.
func TestStaleStampede(t *testing.T) {
	for round := range 20 {
		o := testOptions(t)
		writeLock(t, o.Path, deadPID(t), "0123456789abcdef")
		const n = 8
		var winners atomic.Int64
		var held []*Held
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				h, err := TryAcquire(o)
				if err != nil && !errors.Is(err, ErrHeld) {
					t.Error(err)
				}
				if h != nil {
					winners.Add(1)
					mu.Lock()
					held = append(held, h)
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		if winners.Load() != 1 {
			t.Fatalf("round %d: %d winners over one stale lock", round, winners.Load())
		}
		for _, h := range held {
			h.Release()
		}
	}
}

// What killed processes leave beside the lock is swept by the next holder;
// what belongs to live processes stays.
func TestSweepLeftovers(t *testing.T) {
	o := testOptions(t)
	os.MkdirAll(filepath.Dir(o.Path), 0o755)
	dead, alive := deadPID(t), os.Getpid()
	gone := []string{
		fmt.Sprintf("%s.stale-%d-abc123", o.Path, dead),
		fmt.Sprintf("%s.tmp-%d-abc123", o.Path, dead),
		o.Path + liveSuffix + "0123456789abcdef", // nobody holds its lock
	}
	kept := []string{
		fmt.Sprintf("%s.stale-%d-abc123", o.Path, alive), // a live process's set-aside lock
		filepath.Join(filepath.Dir(o.Path), "other.lock.stale-1-x"),
	}
	for _, p := range append(gone, kept...) {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A liveness file whose lock is held beside another lock stays too.
	// (One beside a device's lock of this one keeps this one held: see
	// TestDeviceJobWithoutItsRecordKeepsThePlainLock.)
	held, err := takeLive(filepath.Join(filepath.Dir(o.Path), "other.lock"), "fedcba9876543210")
	if err != nil {
		t.Fatal(err)
	}
	defer held.release()
	h, err := TryAcquire(o)
	if h == nil || err != nil {
		t.Fatalf("TryAcquire = %v, %v", h, err)
	}
	h.Release()
	for _, p := range gone {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s not swept", filepath.Base(p))
		}
	}
	for _, p := range append(kept, held.path) {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s swept: %v", filepath.Base(p), err)
		}
	}
}
