package cli

// Red-team tests of backfill (see backfill_test.go).

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// A backfilling sharer works out when the head could start with its own
// --reserve, not the head's. On the 24 GiB card (22494 MiB to share with
// the default 1228 MiB reserve, 500 MiB in use by others) a (8G, stopped
// at 12 s) and c (8G, stopped at 10 min) hold the card; the head (13G,
// default reserve) has 6110 MiB now and 14302 MiB once a is stopped: by
// its holders' word it starts at a's deadline, 12 s out. tts (2G,
// --timeout 60s) with --reserve 5G sees only 2218 MiB to share: by its
// reckoning the head must wait for c too (10 min), so it starts ahead,
// and once a is stopped the head (12254 MiB left beside c and tts) waits
// for tts's 60 s: past what its holders' deadlines promised. With the
// default reserve tts keeps its place (the control).
func TestBackfillReckonsTheHeadWithItsOwnReserve(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reserve []string
	}{
		{"same reserve as the head (control)", nil},
		{"larger reserve than the head's", []string{"--reserve", "5G"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, lock := lockIn(t)
			c := newCard(t, rtx4090(500))
			a := startShared(t, c, lock, "--share", "--vram", "8G", "--timeout", "12s", "--kill-after", "0", "--slug", "a")
			awaitStarted(t, a)
			cc := startShared(t, c, lock, "--share", "--vram", "8G", "--timeout", "600s", "--kill-after", "0", "--slug", "c")
			awaitStarted(t, cc)
			h := startShared(t, c, lock, "--share", "--vram", "13G", "--owner", "reels", "--slug", "render")
			testsupport.Await(t, long, "the head queued", func() bool { return queueLen(t, lock) == 1 })
			b := startShared(t, c, lock, append([]string{"--share", "--vram", "2G", "--timeout", "60s", "--kill-after", "0", "--slug", "tts"}, tc.reserve...)...)
			t.Cleanup(func() {
				for _, j := range []*sharedJob{b, h, cc, a} {
					j.stdin.Close()
				}
			})
			testsupport.StillBlocked(t, 4*time.Second, "the head beside a and c", h.started)
			if b.started() {
				t.Errorf("tts (ends in 60 s) started ahead of a head that can start in 12 s, when a is stopped:\n%s", b.stderr())
			}
			// a is stopped at its deadline: the head must start then.
			wantCode(t, a.wait(t), 124)
			aEnded := time.Now()
			if !testsupport.Poll(10*time.Second, h.started) {
				t.Fatalf("the head did not start within 10 s of a's deadline (the one its holders promised); tts ahead: %v", strings.Contains(b.stderr(), "started ahead of"))
			}
			t.Logf("the head started %s after a was stopped", time.Since(aEnded).Round(time.Millisecond))
		})
	}
}
