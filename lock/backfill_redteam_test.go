package lock

// Red-team tests of backfill (see backfill.go and backfill_test.go).

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// fitsAndPasses is an Options.AdmitShare for a device of cap MiB, as the
// gate decides it: a sharer of need MiB fits beside the budgets, and one
// ahead of the queue also ends before the head could start (Ahead.Passes,
// with the room left to share now). Each call is counted; delay is how
// long the answer takes (nvidia-smi's readings), after is called with
// the answer, before it is given.
func fitsAndPasses(cap, need int64, delay time.Duration, calls *atomic.Int64, after func(ok bool, c Candidate)) func(context.Context, []Candidate) ([]bool, string) {
	return func(_ context.Context, cs []Candidate) ([]bool, string) {
		calls.Add(1)
		time.Sleep(delay)
		ok := make([]bool, len(cs))
		why := ""
		for i, c := range cs {
			used, known := Budget(c.Sharers)
			ok[i] = known && used+need <= cap && (c.Ahead == nil || c.Ahead.Passes(time.Now(), cap-used, c.Sharers))
			if !ok[i] {
				why = "room for the budget"
			}
			if after != nil {
				after(ok[i], c)
			}
		}
		return ok, why
	}
}

// holdShared takes the lock at path as a sharer of mib with a deadline
// hold out (TryAcquire: nobody queued yet), on a device of cap.
func holdShared(t *testing.T, path string, cap, mib int64, hold time.Duration) *Held {
	t.Helper()
	o := sharerOptions(t, path, mib)
	o.AdmitShare = capacity(cap, mib, nil)
	o.HoldLimit = hold
	h, err := TryAcquire(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Release() })
	return h
}

// queueHead queues a sharer of mib (no deadline) on a device of cap and
// waits until it is in the queue.
func queueHead(t *testing.T, path string, cap, mib int64) {
	t.Helper()
	o := sharerOptions(t, path, mib)
	o.Owner, o.Slug = "reels", "render"
	o.AdmitShare = capacity(cap, mib, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if h, err := Acquire(ctx, o); err == nil {
			h.Release()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	testsupport.Await(t, 20*time.Second, "the head queued", func() bool {
		r, _ := Inspect(Options{Path: path})
		return r != nil && len(r.Queue) == 1
	})
}

// What AdmitShare let a backfiller pass is reused at the join when the
// sum of the budgets is the same (admit compares sums; the check at the
// try, mayBackfill's, reckons with the room as small as the backfiller's
// own budget). A sharer that leaves and another of the same budget that
// joins between the answer and the join leave the sum as it was, but the
// head's start is another. On a device of 26, A (8, stopped at 100 s),
// C (8, at 50 s) and D (4, at 200 s) hold it (6 free); the head needs 21
// (14 at C's deadline, 22 at A's: 100 s); the backfiller (2, ends at
// 90 s) is admitted. A leaves and B (8, stopped at 10 s) joins: a fair
// backfiller itself, since with A gone the head (14 free) starts at C's
// deadline. The head could now start at 50 s (B and C gone: 22 free),
// but beside the backfiller it has 20 and waits until 90 s.
func TestRedteamBackfillJoinsOnAStaleAnswerWhenTheSumIsUnchanged(t *testing.T) {
	path := testOptions(t).Path
	a := holdShared(t, path, 26, 8, 100*time.Second)
	holdShared(t, path, 26, 8, 50*time.Second)
	holdShared(t, path, 26, 4, 200*time.Second)
	queueHead(t, path, 26, 21)

	o := sharerOptions(t, path, 2)
	o.HoldLimit, o.Backfill, o.Poll = 90*time.Second, true, time.Minute
	var calls atomic.Int64
	var swapped atomic.Bool
	o.AdmitShare = fitsAndPasses(26, 2, 0, &calls, func(ok bool, c Candidate) {
		if !ok || c.Ahead == nil || swapped.Swap(true) {
			return
		}
		// Between the answer and the join: A leaves, B joins.
		a.Release()
		st := inspectOne1(t, path)
		bo := sharerOptions(t, path, 8)
		bo.HoldLimit = 10 * time.Second
		sh, err := newSidecar(bo, path, st.Info.Token)
		if err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(sh.leave)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	h, err := Acquire(ctx, o)
	if err == nil {
		defer h.Release()
		st := inspectOne1(t, path)
		var others []Sharer
		for _, s := range st.Sharers {
			if s.PID != os.Getpid() || s.MiB != 2 {
				others = append(others, s)
			}
		}
		now := time.Now()
		head := Ahead{MiB: 21}
		at, ok := head.HeadStart(now, 26-20, others)
		t.Fatalf("joined ahead of the head on an answer given for other sharers (swapped: %v): the head could start in %s (%v), this job ends in %s",
			swapped.Load(), at.Sub(now).Round(time.Second), ok, o.HoldLimit)
	}
	if !swapped.Load() {
		t.Fatalf("never admitted ahead of the head (%d asks): %v", calls.Load(), err)
	}
}

// The previous gpuexec's ticket has no "share" nor "vramMiB": a sharer
// queued by it reads as a whole-card waiter, whose start is the last
// sharer's deadline. On a device with 4 free, A (12, stopped in a minute)
// and C (2, in an hour), such a head needing 12 starts in a minute; a
// backfiller ending in 30 minutes passes it.
func TestRedteamBackfillTakesAnOlderSharersTicketForAWholeCardOne(t *testing.T) {
	dir := t.TempDir()
	lockPath := filepath.Join(dir, "gpu.lock")
	// As fdfd6aa^ wrote a sharer's ticket: no share, whole, vramMiB.
	ticketAt(t, lockPath, 1, ticketRecord{PID: 1, Owner: "reels", Slug: "render", Since: "2026-12-03T12:00:00.000Z", Locks: []string{"gpu.lock"}}, true)
	o := Options{Path: lockPath, HoldLimit: 30 * time.Minute}
	a, ok := backfillAhead(newQueue(lockPath, []string{lockPath}), 2, o, minJoinSlack)
	if !ok {
		return // not passed: fine
	}
	now := time.Now()
	sharers := []Sharer{{MiB: 12, Deadline: now.Add(time.Minute).Format(isoMillis)}, {MiB: 2, Deadline: now.Add(time.Hour).Format(isoMillis)}}
	if a.Passes(now, 4, sharers) {
		t.Fatalf("an older gpuexec's sharer ticket read as %+v: a job ending in 30 minutes passes a head that starts in a minute", *a)
	}
}

// A sharer that fits now and ends long before the head can start does
// not backfill (on a device of 24, A holds 12 until a minute from now; the
// backfiller needs 2 and ends in 5.4 s):
//
//   - when the gate answers in more than joinSlack (0.3 s): the answer
//     must come within it of the try that asked, or the join asks again;
//     the real gate reads nvidia-smi twice, 250 ms apart, at a first ask,
//     and each read takes 50 ms to a second or more. It asks again every
//     second for nothing.
//   - when the head needs more than the backfiller's budget and the
//     sharers' together (16 > 2 + 12): mayBackfill reckons with the room
//     as small as its own budget, finds the head then never starts, and
//     takes that for a start it cannot bound, not for the latest one.
func TestRedteamBackfillMissed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		head  int64
		delay time.Duration
	}{
		{"fast gate (control)", 13, 0},
		{"gate answering in 400ms", 13, 400 * time.Millisecond},
		{"head needs more than own budget and the sharers'", 16, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := testOptions(t).Path
			holdShared(t, path, 24, 12, time.Minute)
			queueHead(t, path, 24, tc.head)
			o := sharerOptions(t, path, 2)
			o.HoldLimit, o.Backfill, o.Poll = 5*time.Second, true, time.Minute
			var calls atomic.Int64
			o.AdmitShare = fitsAndPasses(24, 2, tc.delay, &calls, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			h, err := Acquire(ctx, o)
			if err != nil {
				t.Fatalf("a sharer that fits and ends 55 s before the head can start did not backfill (%d asks): %v", calls.Load(), err)
			}
			h.Release()
		})
	}
}

// A head that AdmitShare refuses asks again at once whenever a file named
// as a liveness file or a sidecar of its lock is removed: anyone who may
// write the folder has it ask (nvidia-smi, twice) as fast as it answers.
// Before 026972a it asked once a second.
func TestRedteamAdmissionWaitHasNoFloor(t *testing.T) {
	for _, storm := range []bool{false, true} {
		t.Run(map[bool]string{false: "quiet", true: "names removed"}[storm], func(t *testing.T) {
			path := testOptions(t).Path
			holdShared(t, path, 24, 12, 0)
			o := sharerOptions(t, path, 16)
			o.Poll = time.Minute
			var calls atomic.Int64
			o.AdmitShare = fitsAndPasses(24, 16, time.Millisecond, &calls, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				name := path + shareSuffix + "x"
				for {
					select {
					case <-stop:
						return
					default:
					}
					if storm {
						os.WriteFile(name, nil, 0o600)
						os.Remove(name)
					}
					time.Sleep(time.Millisecond)
				}
			}()
			_, err := Acquire(ctx, o)
			close(stop)
			<-done
			if err == nil {
				t.Fatal("acquired")
			}
			// At most askBurst times an askWindow, however often
			// it is woken.
			if n := calls.Load(); n > askBurst*int64(3*time.Second/askWindow+1) {
				t.Fatalf("AdmitShare asked %d times in 3 s (at most %d every %s)", n, askBurst, askWindow)
			}
		})
	}
}
