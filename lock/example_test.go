package lock_test

import (
	"context"
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
		st, _ := lock.Inspect(o.Path, 0)
		fmt.Println("inside:", st.State, st.Info.Owner+"/"+st.Info.Slug)
		return nil
	})
	st, _ := lock.Inspect(o.Path, 0)
	fmt.Println("after:", st.State, err)
	// Output:
	// inside: held channels/ep12
	// after: free <nil>
}

// TryAcquire reports contention as false, not as an error.
func ExampleTryAcquire() {
	dir, _ := os.MkdirTemp("", "gpuexec-example")
	defer os.RemoveAll(dir)
	o := lock.Options{Path: filepath.Join(dir, "gpu.lock"), Owner: "reels", Slug: "tts"}

	first, ok, err := lock.TryAcquire(o)
	fmt.Println("first:", ok, err)
	_, ok, err = lock.TryAcquire(o)
	fmt.Println("second:", ok, err)
	first.Release()
	// Output:
	// first: true <nil>
	// second: false <nil>
}
