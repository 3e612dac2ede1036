// Package testsupport holds what the tests of this module share: awaiting a
// condition with a deadline, checking that something stays blocked, building
// a binary, a pid no process uses, the state of a process, gpuexec's status,
// a temporary folder of the test process's own and a few helpers for the
// processes tests start.
//
// It is for tests only and imports no package of this module, so that any
// package's tests (package lock's own included) may use it.
package testsupport

import (
	"testing"
	"time"
)

// tick is how often Poll, Await and StillBlocked evaluate their condition.
const tick = 5 * time.Millisecond

// Poll evaluates cond every few milliseconds until it holds, and then
// returns true; it returns false once timeout has passed with cond never
// holding. cond is evaluated at least once, and once more after the
// deadline has passed before Poll gives up.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(tick)
	defer t.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-t.C
	}
	return true
}

// Await is Poll that fails t (t.Fatalf, "timed out after TIMEOUT waiting for
// WHAT") when cond does not hold within timeout. Call it from the test's
// goroutine only; elsewhere, use Poll.
func Await(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// StillBlocked fails t (t.Fatalf) as soon as happened reports true during
// the next d: what must not happen yet has happened. happened is evaluated
// every few milliseconds and once more after d, so that anything that
// happened within d is seen. what names the event, as in "the waiter
// started". Call it from the test's goroutine only.
func StillBlocked(t testing.TB, d time.Duration, what string, happened func() bool) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(d)
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		past := !time.Now().Before(deadline)
		if happened() {
			t.Fatalf("%s after %s, while it must stay blocked for %s", what, time.Since(start).Round(time.Millisecond), d)
		}
		if past {
			return
		}
		<-tk.C
	}
}
