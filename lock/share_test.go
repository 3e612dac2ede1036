package lock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// capacity is an Options.AdmitShare for a device of cap MiB: a sharer of
// need MiB is admitted while the live sharers' budgets and its own fit.
func capacity(cap, need int64, calls *atomic.Int64) func(context.Context, []Candidate) ([]bool, string) {
	return func(_ context.Context, cs []Candidate) ([]bool, string) {
		if calls != nil {
			calls.Add(1)
		}
		ok := make([]bool, len(cs))
		why := ""
		for i, c := range cs {
			used, known := Budget(c.Sharers)
			ok[i] = known && used+need <= cap
			if !ok[i] {
				why = "room for the budget"
			}
		}
		return ok, why
	}
}

func sharerOptions(t *testing.T, path string, mib int64) Options {
	o := testOptions(t)
	o.Path, o.ShareMiB = path, mib
	o.AdmitShare = capacity(24, mib, nil)
	return o
}

func inspectOne1(t *testing.T, path string) *Status {
	t.Helper()
	r, err := Inspect(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	return r.Locks[0]
}

// Two sharers of 10 on a device of 24 hold the lock together, a third
// waits for room, a whole-card job never joins, and the record stays a
// valid seed record until the last sharer leaves.
func TestShareJoinLeave(t *testing.T) {
	path := testOptions(t).Path
	a, err := TryAcquire(sharerOptions(t, path, 10))
	if err != nil {
		t.Fatal(err)
	}
	b, err := TryAcquire(sharerOptions(t, path, 10))
	if err != nil {
		t.Fatalf("second sharer: %v", err)
	}
	st := inspectOne1(t, path)
	if st.State != StateHeld || st.Info == nil || !st.Info.Share || len(st.Sharers) != 2 {
		t.Fatalf("two sharers: %+v", st)
	}
	if used, _ := Budget(st.Sharers); used != 20 {
		t.Fatalf("budgets %d, want 20", used)
	}
	if _, err := TryAcquire(sharerOptions(t, path, 10)); !errors.Is(err, ErrRefused) {
		t.Fatalf("third sharer: %v, want refused", err)
	}
	whole := testOptions(t)
	whole.Path = path
	if _, err := TryAcquire(whole); !errors.Is(err, ErrHeld) {
		t.Fatalf("whole-card job beside sharers: %v, want held", err)
	}
	// The seed's reader sees a valid record.
	b1, _ := os.ReadFile(path)
	if info, err := parseRecord(b1); err != nil || info.PID != os.Getpid() {
		t.Fatalf("record %q: %v", b1, err)
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	st = inspectOne1(t, path)
	if st.State != StateHeld || len(st.Sharers) != 1 || st.Sharers[0].MiB != 10 {
		t.Fatalf("one sharer left: %+v", st)
	}
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	if st := inspectOne1(t, path); st.State != StateFree {
		t.Fatalf("after the last sharer: %+v", st)
	}
	if odd := leftovers(t, path); len(odd) > 0 {
		t.Fatalf("left behind: %v", odd)
	}
}

// A whole-card holder is never joined; a sharer that finds it waits.
func TestShareNeverJoinsAWholeCard(t *testing.T) {
	o := testOptions(t)
	h, err := TryAcquire(o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if _, err := TryAcquire(sharerOptions(t, o.Path, 1)); !errors.Is(err, ErrHeld) {
		t.Fatalf("sharer beside a whole-card holder: %v", err)
	}
}

// A sharer that dies (its kernel locks dropped, nothing released) no
// longer counts: its budget is free at the next look, and once every
// sharer is gone the lock is stale by its liveness file alone.
func TestShareDeadSharerFreesItsBudget(t *testing.T) {
	path := testOptions(t).Path
	a, _ := TryAcquire(sharerOptions(t, path, 10))
	b, err := TryAcquire(sharerOptions(t, path, 10))
	if err != nil {
		t.Fatal(err)
	}
	die(b)
	st := inspectOne1(t, path)
	if st.State != StateHeld || len(st.Sharers) != 1 {
		t.Fatalf("after one died: %+v", st)
	}
	c, err := TryAcquire(sharerOptions(t, path, 12))
	if err != nil {
		t.Fatalf("a sharer into the freed budget: %v", err)
	}
	die(a)
	die(c)
	if st := inspectOne1(t, path); st.State != StateStale {
		t.Fatalf("every sharer dead: %+v", st)
	}
	whole := testOptions(t)
	whole.Path = path
	h, err := TryAcquire(whole)
	if err != nil {
		t.Fatalf("whole card after the sharers died: %v", err)
	}
	h.Release()
	if odd := leftovers(t, path); len(odd) > 0 {
		t.Fatalf("left behind: %v", odd)
	}
}

// die drops h's kernel locks as a killed process would, releasing nothing.
func die(h *Held) {
	for _, l := range h.locks {
		l.stopHeartbeat()
		l.live.f.Close()
		if l.share != nil {
			l.share.f.Close()
		}
	}
}

// A whole-card job queued first is served before sharers that arrive
// after it, although they would fit beside the running sharer.
func TestShareWholeCardAtTheHeadIsNotStarved(t *testing.T) {
	path := testOptions(t).Path
	a, err := TryAcquire(sharerOptions(t, path, 4))
	if err != nil {
		t.Fatal(err)
	}
	whole := testOptions(t)
	whole.Path = path
	got := acquireAsync(t, whole)
	testsupport.Await(t, 20*time.Second, "the whole-card job queued", func() bool {
		r, _ := Inspect(Options{Path: path})
		return r != nil && len(r.Queue) == 1
	})
	later := sharerOptions(t, path, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if h, err := Acquire(ctx, later); err == nil {
		h.Release()
		t.Fatal("a later sharer joined ahead of the whole-card job at the head")
	}
	a.Release()
	var h *Held
	select {
	case h = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the whole-card job was not served")
	}
	if st := inspectOne1(t, path); st.Info == nil || st.Info.Share {
		t.Fatalf("holder: %+v", st)
	}
	h.Release()
}

// The budgets a sharer was admitted with are checked again under the
// guard: a device whose budgets grew meanwhile is asked about again.
func TestShareAdmittedBudgetRechecked(t *testing.T) {
	path := testOptions(t).Path
	a, _ := TryAcquire(sharerOptions(t, path, 10))
	defer a.Release()
	o := sharerOptions(t, path, 10)
	var calls atomic.Int64
	inner := capacity(24, 10, &calls)
	o.AdmitShare = func(ctx context.Context, cs []Candidate) ([]bool, string) {
		ok, why := inner(ctx, cs)
		if calls.Load() == 1 {
			// Someone joins between the answer and the join.
			h, err := TryAcquire(sharerOptions(t, path, 10))
			if err != nil {
				t.Error(err)
			} else {
				t.Cleanup(func() { h.Release() })
			}
		}
		return ok, why
	}
	if h, err := TryAcquire(o); err == nil {
		h.Release()
		t.Fatal("joined with budgets that grew after the answer")
	}
	if st := inspectOne1(t, path); len(st.Sharers) != 2 {
		t.Fatalf("sharers: %+v", st.Sharers)
	}
}

// Sidecars are hostile input: a link, a FIFO-like name, garbage content in
// an unlocked file or a locked one are never followed, never block, and a
// locked unreadable one makes the budget unknown (nothing joins).
func TestShareHostileSidecars(t *testing.T) {
	path := testOptions(t).Path
	a, err := TryAcquire(sharerOptions(t, path, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	dir := filepath.Dir(path)
	target := filepath.Join(t.TempDir(), "target")
	os.WriteFile(target, []byte(`{"pid":1,"vramMiB":1}`), 0o644)
	os.Symlink(target, sharePath(path, "0000000000000001"))
	os.WriteFile(sharePath(path, "0000000000000002"), []byte("garbage"), 0o644)
	os.WriteFile(filepath.Join(dir, "gpu.lock.share-../../x"), nil, 0o644)
	st := inspectOne1(t, path)
	if len(st.Sharers) != 1 {
		t.Fatalf("sharers: %+v", st.Sharers)
	}
	// A locked sidecar that says nothing readable: unknown budget.
	f, err := osfile.CreateExcl(sharePath(path, "0000000000000003"), osfile.Locked)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	osfile.TryLock(f)
	f.WriteString(`{"pid":"x","vramMiB":-5}`)
	if _, err := TryAcquire(sharerOptions(t, path, 1)); !errors.Is(err, ErrRefused) {
		t.Fatalf("joined beside an unreadable sharer: %v", err)
	}
	if _, err := os.Lstat(target); err != nil {
		t.Fatal("the link's target was touched")
	}
}
