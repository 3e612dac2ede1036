package lock

import (
	"context"
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
