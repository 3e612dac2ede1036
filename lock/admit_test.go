package lock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// admitter is an Options.Admit whose answer the test sets per device
// name, counting the calls.
type admitter struct {
	mu    sync.Mutex
	room  map[string]bool
	calls atomic.Int64
	asked [][]string
}

func newAdmitter(room map[string]bool) *admitter { return &admitter{room: room} }

func (a *admitter) set(name string, ok bool) {
	a.mu.Lock()
	a.room[name] = ok
	a.mu.Unlock()
}

func (a *admitter) admit(_ context.Context, names []string) ([]bool, string) {
	a.calls.Add(1)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, append([]string(nil), names...))
	ok := make([]bool, len(names))
	why := ""
	for i, n := range names {
		ok[i] = a.room[n]
		if !ok[i] && why == "" {
			why = "10.0 GiB on GPU " + n + ": 3.1 GiB free"
		}
	}
	return ok, why
}

func TestAdmitHoldsTheJobUntilThereIsRoom(t *testing.T) {
	o := testOptions(t)
	a := newAdmitter(map[string]bool{"": false})
	o.Admit = a.admit
	got := acquireAsync(t, o)
	testsupport.Await(t, 20*time.Second, "Admit asked twice", func() bool { return a.calls.Load() >= 2 })
	select {
	case <-got:
		t.Fatal("took the lock while Admit refused")
	default:
	}
	if r, err := Inspect(Options{Path: o.Path}); err != nil || r.Locks[0].State != StateFree || len(r.Queue) != 1 || !r.Queue[0].Alive {
		t.Fatalf("while refused: %+v, %v; want the lock free and the waiter queued", r, err)
	}
	a.set("", true)
	var h *Held
	select {
	case h = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("not taken once admitted")
	}
	if h == nil {
		t.Fatal("no lock")
	}
	h.Release()
	if odd := leftovers(t, o.Path); len(odd) > 0 {
		t.Fatalf("left behind: %v", odd)
	}
}

func TestTryAcquireRefused(t *testing.T) {
	o := testOptions(t)
	o.Admit = newAdmitter(map[string]bool{}).admit
	_, err := TryAcquire(o)
	var we *WaitError
	if !errors.As(err, &we) || !errors.Is(err, ErrRefused) || we.Why != "10.0 GiB on GPU : 3.1 GiB free" {
		t.Fatalf("TryAcquire: %v", err)
	}
	if odd := leftovers(t, o.Path); len(odd) > 0 {
		t.Fatalf("left behind: %v", odd)
	}
}

func TestAdmitPicksTheFirstDeviceWithRoom(t *testing.T) {
	o := testOptions(t)
	o.Devices = []string{"0", "1", "2"}
	a := newAdmitter(map[string]bool{"0": false, "1": false, "2": true})
	o.Admit = a.admit
	h, err := TryAcquire(o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if d := h.Devices(); len(d) != 1 || d[0] != "2" {
		t.Fatalf("took %v, want [2]", d)
	}
	if len(a.asked) != 1 || len(a.asked[0]) != 3 {
		t.Fatalf("asked %v, want one call about the three free devices", a.asked)
	}
}

// A waiter held up by memory keeps its place: one behind it (that needs
// no memory) does not pass it, however long the lock stays free, and
// takes the lock after it.
func TestAdmitKeepsThePlace(t *testing.T) {
	o := testOptions(t)
	o.Poll = time.Hour // the passing of heads, not a poll, is what is tried
	a := newAdmitter(map[string]bool{"": false})
	first := o
	first.Slug = "first"
	first.Admit = a.admit
	second := o
	second.Slug = "second"

	order := make(chan string, 2)
	var wg sync.WaitGroup
	defer wg.Wait() // released before the folder is removed
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // first: a failed test's waiters give up
	run := func(o Options) {
		defer wg.Done()
		h, err := Acquire(ctx, o)
		if err != nil {
			t.Error(err)
			order <- "error"
			return
		}
		order <- o.Slug
		h.Release()
	}
	wg.Add(2)
	go run(first)
	testsupport.Await(t, 20*time.Second, "the first waiter asked", func() bool { return a.calls.Load() >= 1 })
	go run(second)
	testsupport.Await(t, 20*time.Second, "the second waiter queued", func() bool { return liveWaiters(t, o.Path) == 2 })
	testsupport.StillBlocked(t, 3*headGrace, "a lock taken past a waiter held up by memory", func() bool { return len(order) > 0 })
	a.set("", true)
	wantServed(t, order, "first", "second")
}

// A head that stopped (it does not tend its ticket) is still passed.
func TestStoppedHeadIsPassedDespiteAdmit(t *testing.T) {
	o := testOptions(t)
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	g, err := takeGuard(context.Background(), o.Path)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := takeTicket(g, o, newQueue(o.Path, []string{o.Path}))
	g.release()
	if err != nil {
		t.Fatal(err)
	}
	defer tk.drop()
	// The ticket is this process's and alive, but nobody tends it: a
	// head that leaves the free lock untaken.
	old := time.Now().Add(-time.Minute)
	touchAt(t, tk, old)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o.Poll = time.Hour // the passing, not a poll, must take it
	h, err := Acquire(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
}

func touchAt(t *testing.T, tk *ticket, at time.Time) {
	t.Helper()
	if err := osfile.Touch(tk.f, at); err != nil {
		t.Fatal(err)
	}
}

// A waiter asks Admit (which samples the card: a second or more) only once
// it holds its place in the queue: one that comes while it asks queues
// behind it, even on its very first try, and does not take the free lock
// from under it.
func TestAdmitAskedFromAPlace(t *testing.T) {
	o := testOptions(t)
	o.Poll = time.Hour
	asking, answer := make(chan struct{}, 1), make(chan bool)
	first := o
	first.Slug = "first"
	first.Admit = func(ctx context.Context, names []string) ([]bool, string) {
		select {
		case asking <- struct{}{}:
		default:
		}
		select {
		case ok := <-answer:
			return []bool{ok}, ""
		case <-ctx.Done():
			return []bool{false}, ""
		}
	}
	second := o
	second.Slug = "second"

	order := make(chan string, 2)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := func(o Options) {
		defer wg.Done()
		h, err := Acquire(ctx, o)
		if err != nil {
			order <- "error"
			return
		}
		order <- o.Slug
		h.Release()
	}
	wg.Add(1)
	go run(first)
	select {
	case <-asking:
	case <-time.After(20 * time.Second):
		t.Fatal("Admit not asked")
	}
	wg.Add(1)
	go run(second)
	testsupport.StillBlocked(t, 3*headGrace, "the free lock taken from under a waiter asking Admit", func() bool { return len(order) > 0 })
	answer <- true
	wantServed(t, order, "first", "second")
}

// TryAcquire bounds its wait for a guard, not Admit: an Admit that takes
// longer than that bound (three runs of a slow nvidia-smi) is answered,
// not taken for a guard held by a stopped process.
func TestTryAcquireSlowAdmit(t *testing.T) {
	if testing.Short() {
		t.Skip("waits clearGuardWait")
	}
	o := testOptions(t)
	o.Admit = func(ctx context.Context, names []string) ([]bool, string) {
		select {
		case <-time.After(clearGuardWait + time.Second):
			return []bool{true}, ""
		case <-ctx.Done():
			return []bool{false}, "cut short"
		}
	}
	h, err := TryAcquire(o)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
}

// A wait that ends while Admit is asked the first time ends with what
// Admit said, not as a wait for a holder (there is none).
func TestWaitEndsDuringTheFirstAdmit(t *testing.T) {
	o := testOptions(t)
	o.Admit = func(ctx context.Context, names []string) ([]bool, string) {
		<-ctx.Done()
		return []bool{false}, "1.0 GiB on GPU 0: still measuring"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Acquire(ctx, o)
	var we *WaitError
	if !errors.As(err, &we) || !errors.Is(err, context.DeadlineExceeded) || we.Why != "1.0 GiB on GPU 0: still measuring" {
		t.Fatalf("Acquire: %v (%+v)", err, we)
	}
}

// A judge's probe of a file just created (a ticket, a liveness file) holds
// its lock for a moment: the creator waits it out instead of failing.
func TestLockNewWaitsOutAProbe(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ticket")
	f, err := osfile.CreateExcl(p, osfile.Locked)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	probe, err := osfile.OpenRegular(p, false)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := osfile.TryLock(probe); !ok || err != nil {
		t.Fatalf("the probe's lock: %v, %v", ok, err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(20 * time.Millisecond) // the probe, slowed down
		osfile.Unlock(probe)
		probe.Close()
	}()
	if err := lockNew(f, "ticket"); err != nil {
		t.Fatalf("lockNew behind a probe: %v", err)
	}
	<-released
	// Held for good by someone else: an error, not a hang.
	g, err := osfile.OpenRegular(p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	osfile.Unlock(f)
	if ok, err := osfile.TryLock(g); !ok || err != nil {
		t.Fatalf("another's lock: %v, %v", ok, err)
	}
	if err := lockNew(f, "ticket"); err == nil || !strings.Contains(err.Error(), "ticket locked by another process") {
		t.Fatalf("lockNew against a holder: %v", err)
	}
}

// wantServed checks that the callers named want are served (their names
// come on order) in that order, each within 20 s.
func wantServed(t *testing.T, order <-chan string, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-order:
			if got != w {
				t.Fatalf("served %s, want %s", got, w)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s not served", w)
		}
	}
}
