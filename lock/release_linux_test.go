//go:build linux

package lock

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// A record replaced while its holder's Release waits for the guard (a
// forced clear, then another holder) is never touched by that Release, not
// even renamed aside and put back: in between, others would see the lock
// free.
func TestReleaseWaitingForTheGuardLeavesAReplacedRecord(t *testing.T) {
	o := testOptions(t)
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	g, err := takeGuard(context.Background(), o.Path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Release() }()
	// Release is past its heartbeat's stop and waits for the guard.
	waitUntil(t, "Release to wait for the guard", func() bool { return h.locks[0].released.Load() })
	if err := os.Remove(o.Path); err != nil {
		t.Fatal(err)
	}
	writeLock(t, o.Path, os.Getpid(), "0123456789abcdef")
	var before syscall.Stat_t
	if err := syscall.Lstat(o.Path, &before); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a rename would change the ctime
	g.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var after syscall.Stat_t
	if err := syscall.Lstat(o.Path, &after); err != nil {
		t.Fatalf("the other holder's record: %v", err)
	}
	if after.Ino != before.Ino || after.Ctim != before.Ctim {
		t.Fatalf("the other holder's record was moved (ctime %v, was %v)", after.Ctim, before.Ctim)
	}
}
