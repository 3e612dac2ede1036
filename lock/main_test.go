package lock

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain doubles as a helper process: with GPUEXEC_LOCK_TEST_ROLE=hold the
// test binary takes the lock at GPUEXEC_LOCK_TEST_PATH, prints "held", and
// holds it until killed.
func TestMain(m *testing.M) {
	if os.Getenv("GPUEXEC_LOCK_TEST_ROLE") == "hold" {
		h, err := Acquire(context.Background(), Options{Path: os.Getenv("GPUEXEC_LOCK_TEST_PATH"), Owner: "helper", Slug: "hold"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("held", h.Info().Token)
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	goleak.VerifyTestMain(droppedCheck{m})
}
