package lock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// A plain waiter needs every device: while it waits for a held one, the
// others it leaves free are not left by a stopped head, and a device
// waiter that came after it does not take one of them (however long it
// stays free); it is served after the plain waiter.
func TestDeviceWaiterDoesNotPassAPlainWaiter(t *testing.T) {
	o := testOptions(t)
	o.Poll = time.Hour // the passing of heads, not a poll, is what is tried
	d0, d1 := o, o
	d0.Devices, d1.Devices = []string{"0"}, []string{"1"}
	o.Slug, d0.Slug = "plain", "device"
	h1, err := Acquire(context.Background(), d1)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			h1.Release()
		}
	}()

	order := make(chan string, 2)
	var wg sync.WaitGroup
	defer wg.Wait() // released before the folder is removed
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // first: a failed test's waiters give up
	run := func(o Options) {
		defer wg.Done()
		h, err := Acquire(ctx, o)
		if err != nil {
			if ctx.Err() == nil {
				t.Error(err)
			}
			order <- "error"
			return
		}
		order <- o.Slug
		h.Release()
	}
	wg.Add(1)
	go run(o)
	testsupport.Await(t, 20*time.Second, "the plain waiter queued", func() bool { return liveWaiters(t, o.Path) == 1 })
	wg.Add(1)
	go run(d0)
	testsupport.Await(t, 20*time.Second, "the device waiter queued", func() bool { return liveWaiters(t, o.Path) == 2 })
	testsupport.StillBlocked(t, 3*headGrace, "GPU 0 taken by a device waiter that came after a plain waiter", func() bool { return len(order) > 0 })
	released = true
	if err := h1.Release(); err != nil {
		t.Fatal(err)
	}
	wantServed(t, order, "plain", "device")
}

// Clear of a device's lock named by its path (gpu1.lock) clears that lock,
// as the error for Options.Devices tells the caller to do: never the lock
// it is beside, which may be a plain holder's record or the cover of the
// other devices' jobs.
func TestClearOfADeviceLockByItsPathClearsThatLock(t *testing.T) {
	t.Run("beside a plain holder", func(t *testing.T) {
		o := testOptions(t)
		p, err := Acquire(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release()
		// A SIGKILLed holder's record on GPU 1 (a pid that is gone), as
		// a job of an older gpuexec could leave it beside the plain one.
		dev1 := filepath.Join(filepath.Dir(o.Path), "gpu1.lock")
		writeLock(t, dev1, deadPID(t), "0123456789abcdef")
		plain := mustRead(t, o.Path)
		st, err := Clear(Options{Path: dev1}, false)
		if err != nil || st.State != StateStale || st.Path != dev1 {
			t.Errorf("Clear(gpu1.lock) = %s, %v; want GPU 1's dead holder's lock cleared as stale", cleared(st), err)
		}
		if _, err := os.Stat(dev1); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("GPU 1's stale lock is still there after its Clear: %v", err)
		}
		if _, err := Clear(Options{Path: dev1}, true); err != nil {
			t.Errorf("Clear(gpu1.lock, force) = %v", err)
		}
		if got, err := os.ReadFile(o.Path); err != nil || string(got) != plain {
			t.Fatalf("the plain holder's record after clearing GPU 1's lock: %q, %v; want it untouched", got, err)
		}
	})
	t.Run("beside the cover of another device", func(t *testing.T) {
		o := testOptions(t)
		d0, d1 := o, o
		d0.Devices, d1.Devices = []string{"0"}, []string{"1"}
		h0, err := Acquire(context.Background(), d0)
		if err != nil {
			t.Fatal(err)
		}
		defer h0.Release()
		h1, err := Acquire(context.Background(), d1)
		if err != nil {
			t.Fatal(err)
		}
		defer h1.Release()
		cover := mustRead(t, o.Path)
		dev1 := filepath.Join(filepath.Dir(o.Path), "gpu1.lock")
		st, err := Clear(Options{Path: dev1}, true)
		want := h1.locks[0].record().Token
		if err != nil || st.Path != dev1 || st.Info == nil || st.Info.Token != want {
			t.Errorf("Clear(gpu1.lock, force) = %s, %v; want GPU 1's record (token %s) cleared", cleared(st), err, want)
		}
		if got, err := os.ReadFile(o.Path); err != nil || string(got) != cover {
			t.Fatalf("the cover after clearing GPU 1's lock: %q, %v; want it untouched: GPU 0's job holds it", got, err)
		}
	})
}

// cleared names the lock a Clear judged, for messages.
func cleared(st *Status) string {
	if st == nil {
		return "nil"
	}
	return fmt.Sprintf("%s %s (%s)", filepath.Base(st.Path), st.State, st.Holder())
}
