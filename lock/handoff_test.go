package lock

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// queuedHolder has a second Acquire queue behind a holder and get the lock
// when the holder releases it, so that it holds the lock with a ticket
// taken while it waited.
func queuedHolder(t *testing.T, o Options) *Held {
	t.Helper()
	first, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, o)
	waitUntil(t, "the second caller queued", func() bool { return liveWaiters(t, o.Path) == 1 })
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	h := <-got
	if h == nil {
		t.FailNow()
	}
	t.Cleanup(func() { h.Release() })
	return h
}

func tickets(t *testing.T, path string) []ticketEntry {
	t.Helper()
	l, err := listTickets(path)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The ticket a waiter queued with is let go of beside its job's start, not
// before it: it stays until LeaveQueue, Release or leaveQueueAfter, and
// goes then; NoteChild, which notes the job's start, leaves it alone.
func TestTicketLetGoBesideTheJobsStart(t *testing.T) {
	cases := []struct {
		name   string
		after  time.Duration // leaveQueueAfter
		leave  func(t *testing.T, h *Held)
		atOnce bool // gone when leave returns
	}{
		{"LeaveQueue", time.Hour, func(t *testing.T, h *Held) {
			if err := h.NoteChild(os.Getpid()); err != nil {
				t.Fatal(err)
			}
			if got := tickets(t, h.Path()); len(got) != 1 {
				t.Fatalf("tickets after NoteChild = %v; want the holder's, kept until LeaveQueue", got)
			}
			h.LeaveQueue()
		}, false},
		{"Release", time.Hour, func(t *testing.T, h *Held) {
			if err := h.Release(); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"nothing said", 100 * time.Millisecond, func(*testing.T, *Held) {}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func(d time.Duration) { leaveQueueAfter = d }(leaveQueueAfter)
			leaveQueueAfter = c.after
			o := testOptions(t)
			h := queuedHolder(t, o)
			if c.after == time.Hour {
				if got := tickets(t, o.Path); len(got) != 1 {
					t.Fatalf("tickets once the lock is had = %v; want the holder's, kept until its job starts", got)
				}
			}
			c.leave(t, h)
			if c.atOnce {
				if got := tickets(t, o.Path); len(got) != 0 {
					t.Fatalf("tickets after Release = %v; want none", got)
				}
				return
			}
			waitUntil(t, "the ticket let go of", func() bool { return len(tickets(t, o.Path)) == 0 })
			if n := liveWaiters(t, o.Path); n != 0 {
				t.Fatalf("%d live waiters, want 0", n)
			}
		})
	}
}

// A waiter behind a holder that keeps its ticket until its job starts is
// still served next, and its place is unchanged meanwhile.
func TestWaiterBehindAHolderWithItsTicket(t *testing.T) {
	defer func(d time.Duration) { leaveQueueAfter = d }(leaveQueueAfter)
	leaveQueueAfter = time.Hour
	o := testOptions(t)
	h := queuedHolder(t, o)
	got := acquireAsync(t, o)
	waitUntil(t, "the third caller queued", func() bool { return liveWaiters(t, o.Path) == 2 })
	if err := h.NoteChild(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	h.LeaveQueue()
	waitUntil(t, "the holder's ticket let go of", func() bool { return liveWaiters(t, o.Path) == 1 })
	select {
	case <-got:
		t.Fatal("the waiter took the lock while it was held")
	case <-time.After(50 * time.Millisecond):
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	h2 := <-got
	if h2 == nil {
		t.FailNow()
	}
	h2.Release()
	if odd := leftovers(t, o.Path); len(odd) > 0 {
		t.Fatalf("left behind: %v", odd)
	}
}

// Release sets the record aside under the guard and deletes it after: none
// is left, and a record that is no longer ours, however it changed, is left
// alone.
func TestReleaseOfAChangedRecord(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, path string)
		want   string // a token the lock file must still hold; "" for none
	}{
		{"unchanged", func(*testing.T, string) {}, ""},
		{"rewritten in place", func(t *testing.T, path string) {
			writeLock(t, path, os.Getpid(), "fedcba9876543210")
		}, "fedcba9876543210"},
		{"replaced by a new file", func(t *testing.T, path string) {
			tmp := path + ".new"
			writeLock(t, tmp, os.Getpid(), "0123456789abcdef")
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, "0123456789abcdef"},
		{"removed", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testOptions(t)
			h, err := Acquire(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			c.change(t, o.Path)
			if err := h.Release(); err != nil {
				t.Fatal(err)
			}
			if c.want != "" && !strings.Contains(mustRead(t, o.Path), c.want) {
				t.Fatal("Release removed another holder's lock")
			}
			if c.want == "" {
				if _, err := os.Lstat(o.Path); !os.IsNotExist(err) {
					t.Fatalf("lock file after Release: %v; want none", err)
				}
			}
			if odd := leftovers(t, o.Path); len(odd) > 0 {
				t.Fatalf("left behind: %v", odd)
			}
		})
	}
}

// A device set's holder drops its ticket as it takes a device: kept, it
// would hold up the waiters for the set's other devices, which are free.
func TestDeviceSetTicketGoesAtOnce(t *testing.T) {
	defer func(d time.Duration) { leaveQueueAfter = d }(leaveQueueAfter)
	leaveQueueAfter = time.Hour
	o := testOptions(t)
	o.Devices = []string{"0", "1"}
	one := func(name string) Options {
		d := o
		d.Devices = []string{name}
		return d
	}
	x, err := Acquire(context.Background(), one("0"))
	if err != nil {
		t.Fatal(err)
	}
	y, err := Acquire(context.Background(), one("1"))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, o)
	waitUntil(t, "the set's waiter queued", func() bool { return liveWaiters(t, o.Path) == 1 })
	if err := x.Release(); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	defer w.Release()
	if got := tickets(t, o.Path); len(got) != 0 {
		t.Fatalf("tickets once the set's waiter holds device 0 = %v; want none", got)
	}
	if err := y.Release(); err != nil {
		t.Fatal(err)
	}
	z, err := TryAcquire(o)
	if err != nil {
		t.Fatalf("TryAcquire of the set with device 1 free: %v", err)
	}
	if d := z.Devices(); len(d) != 1 || d[0] != "1" {
		t.Fatalf("took %v, want [1]", d)
	}
	z.Release()
}

// Release finds the record set aside already gone (another holder's sweep
// in a pid namespace where this process is not seen alive): no error.
func TestReleaseWhenTheSetAsideRecordIsGone(t *testing.T) {
	o := testOptions(t)
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := deleteSetAside(o.Path + ".stale-1-abcdef"); err != nil {
		t.Fatalf("deleteSetAside of a file already gone: %v", err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
}

// A record replaced the moment after it was written (a forced clear, then
// another holder) is noticed by the self-check, long before the next
// heartbeat: the holder's idea of its file is read at once, not at the
// first check (Windows reads a file's identity lazily, by path).
func TestRecordReplacedAtOnceIsNoticed(t *testing.T) {
	o := testOptions(t) // heartbeat: an hour
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if err := os.Remove(o.Path); err != nil {
		t.Fatal(err)
	}
	writeLock(t, o.Path, os.Getpid(), "0123456789abcdef")
	waitUntil(t, "the holder to notice its lock is lost", func() bool {
		select {
		case <-h.Lost():
			return true
		default:
			return false
		}
	})
}
