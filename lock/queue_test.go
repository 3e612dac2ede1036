package lock

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
)

// waitUntil polls cond every millisecond until it holds or the deadline
// passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// acquireAsync starts Acquire(o) in the background; the channel delivers
// the lock it took (nil after an error, which fails the test).
func acquireAsync(t *testing.T, o Options) <-chan *Held {
	got := make(chan *Held, 1)
	go func() {
		h, err := Acquire(context.Background(), o)
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	return got
}

func liveWaiters(t *testing.T, path string) int {
	q, err := readQueue(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, w := range q {
		if w.Alive {
			n++
		}
	}
	return n
}

// TestFIFO queues 8 waiters one after another behind a holder and checks
// they are served in arrival order, every round.
func TestFIFO(t *testing.T) {
	for round := range 5 {
		o := testOptions(t)
		o.Poll = time.Hour // only wake-ups may move the queue
		first, err := Acquire(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		const n = 8
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				oo := o
				oo.Slug = string(rune('a' + i))
				h, err := Acquire(context.Background(), oo)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				h.Release()
			}()
			waitUntil(t, "waiter to queue", func() bool { return liveWaiters(t, o.Path) == i+1 })
		}
		r, err := Inspect(Options{Path: o.Path})
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range r.Queue {
			if w.Position != i+1 || w.Slug != string(rune('a'+i)) || w.PID != os.Getpid() {
				t.Fatalf("queue[%d] = %+v", i, w)
			}
		}
		first.Release()
		wg.Wait()
		for i, got := range order {
			if got != i {
				t.Fatalf("round %d: served in order %v, want arrival order", round, order)
			}
		}
		if odd := leftovers(t, o.Path); len(odd) > 0 {
			t.Fatalf("left behind: %v", odd)
		}
	}
}

func TestQueuedTryAcquireRespectsWaiter(t *testing.T) {
	o := testOptions(t)
	g, err := takeGuard(context.Background(), o.Path)
	if err != nil {
		os.MkdirAll(filepath.Dir(o.Path), 0o755)
		if g, err = takeGuard(context.Background(), o.Path); err != nil {
			t.Fatal(err)
		}
	}
	tk, err := takeTicket(g, o, newQueue(o.Path, []string{o.Path}))
	g.release()
	if err != nil {
		t.Fatal(err)
	}
	if h, err := TryAcquire(o); !contended(h, err) {
		t.Fatalf("TryAcquire with a live waiter queued = %v, %v; want nil, a WaitError wrapping ErrHeld", h, err)
	}
	tk.drop()
	h, err := TryAcquire(o)
	if h == nil || err != nil {
		t.Fatalf("TryAcquire after the waiter left = %v, %v", h, err)
	}
	h.Release()
}

func TestDeadWaitersTicketIsPruned(t *testing.T) {
	o := testOptions(t)
	os.MkdirAll(filepath.Dir(o.Path), 0o755)
	g, err := takeGuard(context.Background(), o.Path)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := takeTicket(g, o, newQueue(o.Path, []string{o.Path}))
	g.release()
	if err != nil {
		t.Fatal(err)
	}
	// The waiter dies: the kernel drops its lock, the file stays.
	osfile.Unlock(tk.f)
	tk.f.Close()
	if r, err := Inspect(Options{Path: o.Path}); err != nil || len(r.Queue) != 1 || r.Queue[0].Alive {
		t.Fatalf("queue with a dead ticket = %+v, %v", r, err)
	}
	h, err := TryAcquire(o)
	if h == nil || err != nil {
		t.Fatalf("TryAcquire past a dead waiter's ticket = %v, %v", h, err)
	}
	h.Release()
	if _, err := os.Stat(tk.path); !os.IsNotExist(err) {
		t.Fatal("dead ticket not pruned")
	}
}

func TestWaitingGivesUpLeavesNoTicket(t *testing.T) {
	o := testOptions(t)
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := Acquire(ctx, o); err == nil {
		t.Fatal("acquired a held lock")
	}
	tickets, _ := listTickets(o.Path)
	if len(tickets) != 0 {
		t.Fatalf("tickets left after giving up: %v", tickets)
	}
}

// TestWakeOnRelease: with a one-hour poll, only the folder watch can wake
// the waiter when the lock is released.
func TestWakeOnRelease(t *testing.T) {
	o := testOptions(t)
	o.Poll = time.Hour
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		h2, err := Acquire(ctx, o)
		if err == nil {
			h2.Release()
		}
		got <- err
	}()
	waitUntil(t, "waiter to queue", func() bool { return liveWaiters(t, o.Path) == 1 })
	h.Release()
	if err := <-got; err != nil {
		t.Fatalf("waiter not woken by the release: %v", err)
	}
}

// TestDeadHolderNoticedWithoutPolling kills a holder process with SIGKILL:
// with a one-hour poll, the liveness probe alone must let the waiter in.
func TestDeadHolderNoticedWithoutPolling(t *testing.T) {
	o := testOptions(t)
	o.Poll = time.Hour
	os.MkdirAll(filepath.Dir(o.Path), 0o755)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GPUEXEC_LOCK_TEST_ROLE=hold", "GPUEXEC_LOCK_TEST_PATH="+o.Path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "held ") {
		t.Fatalf("helper: %q, %v", line, err)
	}
	token := strings.TrimSpace(strings.TrimPrefix(line, "held "))
	if held, known, _ := probeLive(o.Path, token); !held || !known {
		t.Fatalf("helper's liveness lock: held=%v known=%v", held, known)
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		h, err := Acquire(ctx, o)
		if err == nil {
			h.Release()
		}
		got <- err
	}()
	waitUntil(t, "waiter to queue", func() bool { return liveWaiters(t, o.Path) == 1 })
	cmd.Process.Kill()
	cmd.Wait()
	if err := <-got; err != nil {
		t.Fatalf("waiter did not take over from a killed holder: %v", err)
	}
	if _, err := os.Stat(livePath(o.Path, token)); !os.IsNotExist(err) {
		t.Fatal("the dead holder's liveness file was not removed")
	}
}

// A lock file left empty (its creator killed before writing) turns stale
// after writeGrace: a waiter with a one-hour poll takes it then.
func TestEmptyLockTakenWhenGraceEnds(t *testing.T) {
	o := testOptions(t)
	o.Poll = time.Hour
	os.MkdirAll(filepath.Dir(o.Path), 0o755)
	if err := os.WriteFile(o.Path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Nearly out of grace already.
	mt := time.Now().Add(-writeGrace + 200*time.Millisecond)
	os.Chtimes(o.Path, mt, mt)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := Acquire(ctx, o)
	if err != nil {
		t.Fatalf("waiter did not take the lock when its grace ended: %v", err)
	}
	h.Release()
}
