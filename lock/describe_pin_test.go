package lock

import (
	"encoding/json"
	"testing"
	"time"
)

// The text and JSON of a lock kept held by a job whose record was removed,
// and of a sidecar this user may not read, byte for byte.
func TestDescribeOrphanAndUnopened(t *testing.T) {
	mod := time.Date(2026, 10, 12, 20, 18, 8, 0, time.UTC)
	for _, c := range []struct {
		st        *Status
		text, obj string
	}{
		{&Status{State: StateHeld, Path: "/srv/gpuexec/gpu.lock", Alive: true, ModTime: mod, HeartbeatAge: 5 * time.Second,
			Reason: "the liveness file gpu.lock.live.0123456789abcdef is locked: a job whose record was removed still runs",
			orphan: "/srv/gpuexec/gpu.lock.live.0123456789abcdef", orphanGroup: 4250},
			"held by a job whose lock record was removed (process group 4250), alive (the liveness file gpu.lock.live.0123456789abcdef is locked: a job whose record was removed still runs)",
			`{"alive":true,"childPgid":4250,"heartbeatAgeSeconds":null,"liveFile":"/srv/gpuexec/gpu.lock.live.0123456789abcdef","modTime":"2026-10-12T20:18:08.000Z","note":"the liveness file gpu.lock.live.0123456789abcdef is locked: a job whose record was removed still runs","path":"/srv/gpuexec/gpu.lock","staleReason":null,"state":"held"}`},
		{&Status{State: StateHeld, Path: "/srv/gpuexec/gpu.lock", Alive: true, ModTime: mod, HeartbeatAge: 5 * time.Second,
			Reason: "locked", orphan: "/srv/gpuexec/gpu.lock.live.0123456789abcdef"},
			"held by a job whose lock record was removed, alive (locked)",
			`{"alive":true,"heartbeatAgeSeconds":null,"liveFile":"/srv/gpuexec/gpu.lock.live.0123456789abcdef","modTime":"2026-10-12T20:18:08.000Z","note":"locked","path":"/srv/gpuexec/gpu.lock","staleReason":null,"state":"held"}`},
		{&Status{State: StateHeld, Path: "/srv/gpuexec/gpu.lock", Alive: true, ModTime: mod, HeartbeatAge: 5 * time.Second,
			Info:    &Info{PID: 4242, Owner: "channels", Slug: "ep12", Share: true},
			Sharers: []Sharer{{MiB: -1, unopened: true}, {PID: 4300, Owner: "reels", Slug: "tts", MiB: 512}}},
			"held by channels/ep12 (pid 4242), heartbeat 5s ago, alive\n  shared: unknown of budgets by 2 job(s)\n    a sharer whose sidecar this user may not read: budget unknown\n    reels/tts (pid 4300): budget 512 MiB",
			`{"alive":true,"budgetUsedMiB":null,"heartbeatAgeSeconds":5,"modTime":"2026-10-12T20:18:08.000Z","path":"/srv/gpuexec/gpu.lock","sharers":[{"pid":0,"owner":"","slug":"","vramMiB":-1,"since":""},{"pid":4300,"owner":"reels","slug":"tts","vramMiB":512,"since":""}],"staleReason":null,"state":"held"}`},
	} {
		b, err := json.Marshal(c.st.JSON())
		if text := c.st.Describe(); text != c.text || err != nil || string(b) != c.obj {
			t.Errorf("got\n%s\n%s\nwant\n%s\n%s", text, b, c.text, c.obj)
		}
	}
}
