package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpuexec/gpuexec/lock"
)

// WithLock runs one piece of GPU work under the lock and releases it however
// the work ends — what the seed's workers had to write by hand.
func ExampleWithLock() {
	dir, err := os.MkdirTemp("", "gpuexec-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	o := lock.Options{Path: filepath.Join(dir, "gpu.lock"), Owner: "channels", Slug: "ep12"}
	err = lock.WithLock(context.Background(), o, func(ctx context.Context) error {
		// Render here; ctx is cancelled if the lock is lost.
		r, _ := lock.Inspect(lock.Options{Path: o.Path})
		st := r.Locks[0]
		fmt.Println("inside:", st.State, st.Info.Owner+"/"+st.Info.Slug)
		return nil
	})
	r, _ := lock.Inspect(lock.Options{Path: o.Path})
	fmt.Println("after:", r.Locks[0].State, err)
	// Output:
	// inside: held channels/ep12
	// after: free <nil>
}

// TryAcquire reports contention as a *WaitError wrapping ErrHeld, which
// names the holder it saw.
func ExampleTryAcquire() {
	dir, _ := os.MkdirTemp("", "gpuexec-example")
	defer os.RemoveAll(dir)
	o := lock.Options{Path: filepath.Join(dir, "gpu.lock"), Owner: "reels", Slug: "tts"}

	first, err := lock.TryAcquire(o)
	fmt.Println("first:", first != nil, err)
	second, err := lock.TryAcquire(o)
	var werr *lock.WaitError
	if errors.As(err, &werr) {
		h := werr.Holder().Info
		fmt.Println("second:", second != nil, errors.Is(err, lock.ErrHeld), h.Owner+"/"+h.Slug)
	}
	first.Release()
	// Output:
	// first: true <nil>
	// second: false true reels/tts
}
