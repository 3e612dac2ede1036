package cli

// Black-box tests of backfill through the real binary, on a scripted queue
// against the fake nvidia-smi (a 24 GiB card, 22.5 GiB to share): a sharer
// whose --timeout ends before the head of the queue could start runs ahead
// of it, and the head starts when it would have without it; one that would
// end later, or has no --timeout, keeps its place. Every job's end is the
// test's to give (its stdin closed), so the order of events is scripted,
// not timed.

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// backfillRun is one scripted queue: holder a, a 12G sharer with a
// deadline 60 s out, holds the card; the head (a 12G sharer, or a
// whole-card job) cannot start beside it; then the sharer b (2G) arrives
// with bArgs, and must start ahead of the head (wantAhead: within the
// test's long wait, a slow machine's or Wine's process starts included)
// or not (for 4 s, while the head waits too). It checks that the head
// started only once a was gone, b's job then gone too when it had started
// ahead, and reports how long after a's end the head started.
func backfillRun(t *testing.T, head []string, wantAhead bool, bArgs ...string) (headWait time.Duration, b *sharedJob) {
	t.Helper()
	_, lock := lockIn(t)
	c := newCard(t, rtx4090(500))
	a := startShared(t, c, lock, "--share", "--vram", "12G", "--timeout", "60s", "--kill-after", "0", "--slug", "a")
	awaitStarted(t, a)
	h := startShared(t, c, lock, append(head, "--owner", "reels", "--slug", "render")...)
	testsupport.Await(t, long, "the head queued", func() bool { return queueLen(t, lock) == 1 })
	b = startShared(t, c, lock, append([]string{"--share", "--vram", "2G", "--slug", "tts"}, bArgs...)...)
	// The head cannot start while a runs.
	if wantAhead {
		testsupport.Await(t, long, "b started ahead of the head", func() bool {
			if b.exited() {
				t.Fatalf("b's gpuexec exited:\n%s", b.stderr())
			}
			return b.started()
		})
		if h.started() {
			t.Fatal("the head started beside the 12G holder")
		}
	} else {
		testsupport.StillBlocked(t, 4*time.Second, "b or the head", func() bool { return b.started() || h.started() })
	}
	ahead := wantAhead
	// status says by when each sharer is stopped: a's deadline, and b's
	// when it runs.
	human, m := statusOf(t, c, lock)
	if want := map[bool]int{true: 2, false: 1}[ahead]; strings.Count(human, ", stopped by ") != want || len(sharersOf(m)) != want {
		t.Errorf("status with b ahead %v:\n%s", ahead, human)
	}
	for _, sh := range sharersOf(m) {
		if d, _ := sh.(map[string]any)["deadline"].(string); d == "" {
			t.Errorf("status --json: a sharer without its deadline: %v", sh)
		}
	}
	if ahead {
		// The head could start only once a is gone: b, ending first,
		// was never in its way.
		wantCode(t, b.end(t), 0)
	}
	aEnded := time.Now()
	wantCode(t, a.end(t), 0)
	awaitStarted(t, h)
	headWait = time.Since(aEnded)
	if !ahead {
		if b.started() && !h.started() {
			t.Fatal("b started before the head")
		}
		awaitStarted(t, b)
		wantCode(t, b.end(t), 0)
	}
	wantCode(t, h.end(t), 0)
	wantNoLock(t, lock)
	return headWait, b
}

func TestBackfill(t *testing.T) {
	sharerHead := []string{"--share", "--vram", "12G"}
	for _, tc := range []struct {
		name      string
		head      []string
		b         []string
		wantAhead bool
	}{
		// Ends (5 s, a tenth more) long before a's deadline (60 s),
		// the earliest the head could start by a's word.
		{"ends before the head can start", sharerHead, []string{"--timeout", "5s", "--kill-after", "0"}, true},
		{"whole-card head", nil, []string{"--timeout", "5s", "--kill-after", "0"}, true},
		// Could still run when a's deadline comes: would delay the head.
		{"ends after the head could start", sharerHead, []string{"--timeout", "90s", "--kill-after", "0"}, false},
		{"kill-after past the head's start", sharerHead, []string{"--timeout", "5s", "--kill-after", "80s"}, false},
		// No --timeout: no promise of an end, no backfill.
		{"no timeout", sharerHead, nil, false},
		{"kill-after never", sharerHead, []string{"--timeout", "5s", "--kill-after", "never"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wait, b := backfillRun(t, tc.head, tc.wantAhead, tc.b...)
			t.Logf("the head started %s after the holder ended", wait.Round(time.Millisecond))
			const line = "started ahead of reels/render: ends before it can start"
			if got := strings.Contains(b.stderr(), line); got != tc.wantAhead {
				t.Errorf("b's log has %q: %v, want %v\n%s", line, got, tc.wantAhead, b.stderr())
			}
		})
	}
}

// A holder without a deadline may end any time: nobody starts ahead of a
// head that waits for it.
func TestBackfillNeedsTheHoldersDeadlines(t *testing.T) {
	_, lock := lockIn(t)
	c := newCard(t, rtx4090(500))
	a := startShared(t, c, lock, "--share", "--vram", "12G", "--slug", "a")
	awaitStarted(t, a)
	h := startShared(t, c, lock, "--share", "--vram", "12G", "--slug", "render")
	testsupport.Await(t, long, "the head queued", func() bool { return queueLen(t, lock) == 1 })
	b := startShared(t, c, lock, "--share", "--vram", "2G", "--timeout", "5s", "--kill-after", "0", "--slug", "tts")
	testsupport.StillBlocked(t, 4*time.Second, "b behind a head waiting for a holder without a deadline", func() bool { return b.started() || h.started() })
	wantCode(t, a.end(t), 0)
	awaitStarted(t, h)
	awaitStarted(t, b)
	wantCode(t, b.end(t), 0)
	wantCode(t, h.end(t), 0)
}

// The head's start, both ways: the same scripted queue with b able to
// backfill and with b kept behind (no --timeout). In both the head starts
// once the holder it waits for ends; with backfill b has run meanwhile.
func TestBackfillNeverDelaysTheHead(t *testing.T) {
	var waits [2]time.Duration
	for i, bArgs := range [][]string{{"--timeout", "5s", "--kill-after", "0"}, nil} {
		wait, _ := backfillRun(t, []string{"--share", "--vram", "12G"}, i == 0, bArgs...)
		waits[i] = wait
	}
	t.Logf("the head started %s after its holder ended with backfill, %s without", waits[0].Round(time.Millisecond), waits[1].Round(time.Millisecond))
}
