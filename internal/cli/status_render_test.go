package cli

import (
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/lock"
)

// renderCase is one report as Inspect could return it, with the device
// locks beside it.
type renderCase struct {
	name   string
	r      *lock.Report
	beside []*lock.Status
}

const renderDir = "/srv/gpuexec/"

func renderInfo(pid int) *lock.Info {
	return &lock.Info{PID: pid, AcquiredAt: "2026-10-12T20:18:03.000Z", Owner: "channels", Slug: "ep12", Token: "0123456789abcdef"}
}

func renderHeld(pid int) *lock.Status {
	return &lock.Status{State: lock.StateHeld, Path: renderDir + "gpu.lock", Alive: true, Info: renderInfo(pid),
		Fields:  map[string]any{"pid": float64(pid), "owner": "channels", "slug": "ep12", "extra": "kept", "state": "overridden"},
		ModTime: time.Date(2026, 10, 12, 20, 18, 8, 0, time.UTC), HeartbeatAge: 5 * time.Second}
}

func renderCases() []renderCase {
	free := func(path, device string) *lock.Status {
		return &lock.Status{State: lock.StateFree, Path: renderDir + path, Device: device}
	}
	one := func(st *lock.Status, q ...lock.Waiter) *lock.Report {
		return &lock.Report{Path: st.Path, Locks: []*lock.Status{st}, Queue: q}
	}
	with := func(st *lock.Status, f func(*lock.Status)) *lock.Status { f(st); return st }
	device0 := with(renderHeld(4300), func(s *lock.Status) { s.Path, s.Device = renderDir+"gpu0.lock", "0" })
	queue := []lock.Waiter{
		{Position: 1, Seq: 3, PID: 77, Owner: "reels", Slug: "tts", Since: "2026-10-12T20:21:05.000Z", Alive: true, Process: lock.ProcStopped},
		{Position: 2, Seq: 4, PID: 78, Owner: "dead", Slug: "one", Since: "2026-10-12T20:21:05.000Z"},
		{Position: 2, Seq: 5, PID: 79, Owner: "far", Slug: "x", Host: "elsewhere", Since: "not a time", Alive: true},
	}
	sharers := []lock.Sharer{
		{PID: 4242, Owner: "channels", Slug: "ep12", MiB: 10240, UsedMiB: 11468, Over: true, Since: "2026-10-12T20:18:03.000Z"},
		{PID: 4300, Owner: "reels", Slug: "tts", MiB: 512, Gone: true, ChildPGID: 4301, Since: "2026-10-12T20:19:03.000Z"},
		{PID: 4400, Owner: "b", Slug: "y", MiB: 1024, UsedMiB: 100, Unattributed: "its file has 2 links"},
	}
	return []renderCase{
		{name: "free", r: one(free("gpu.lock", ""))},
		{name: "free, a device held beside it", r: one(free("gpu.lock", "")), beside: []*lock.Status{device0, free("gpu1.lock", "1")}},
		{name: "free, devices beside it free", r: one(free("gpu.lock", "")), beside: []*lock.Status{free("gpu1.lock", "1")}},
		{name: "held, with a queue", r: one(renderHeld(4242), queue...)},
		{name: "held, with a note", r: one(with(renderHeld(4242), func(s *lock.Status) {
			s.Reason = "no heartbeat for 1m0s, but its liveness lock is held"
			s.Info.Host = "elsewhere"
		}))},
		{name: "stale", r: one(with(renderHeld(4242), func(s *lock.Status) {
			s.State, s.Alive, s.Reason, s.HeartbeatAge = lock.StateStale, false, "pid 4242 is gone", 2*time.Minute
		}))},
		{name: "a cover, a device held beside it", r: one(with(renderHeld(4242), func(s *lock.Status) { s.Info.Cover = true })),
			beside: []*lock.Status{device0}},
		{name: "no valid record yet", r: one(&lock.Status{State: lock.StateHeld, Path: renderDir + "gpu.lock", Alive: true,
			Content: []byte("{\"pid\":"), ModTime: time.Date(2026, 10, 12, 20, 18, 8, 0, time.UTC), HeartbeatAge: 1500 * time.Millisecond,
			Reason: "lock file has no valid record yet (2s old); it may still be being written"})},
		{name: "shared", r: one(with(renderHeld(4242), func(s *lock.Status) { s.Info.Share, s.Sharers = true, sharers }))},
		{name: "shared, a budget unknown", r: one(with(renderHeld(4242), func(s *lock.Status) {
			s.Info.Share, s.Sharers = true, []lock.Sharer{sharers[0], {PID: 9, Owner: "x", Slug: "y", MiB: -1}}
		}))},
		{name: "shared, no sharers", r: one(with(renderHeld(4242), func(s *lock.Status) { s.Info.Share = true }))},
		{name: "shared, stale", r: one(with(renderHeld(4242), func(s *lock.Status) {
			s.State, s.Alive, s.Reason, s.Info.Share = lock.StateStale, false, "its liveness lock is free", true
		}))},
		{name: "holder gone, its job runs", r: one(with(renderHeld(4242), func(s *lock.Status) {
			s.HolderProcess, s.JobGroup, s.JobProcess = lock.ProcGone, 4250, lock.ProcRunning
		}))},
		{name: "holder gone, its group another user's", r: one(with(renderHeld(4242), func(s *lock.Status) {
			s.HolderProcess, s.JobGroup, s.JobProcess = lock.ProcGone, 4250, lock.ProcStopped
			setDoubt(s, 1001, 0)
		}))},
		{name: "holder stopped, its group another user's", r: one(with(renderHeld(4242), func(s *lock.Status) {
			s.HolderProcess, s.JobGroup, s.JobProcess = lock.ProcStopped, 4250, lock.ProcStopped
			setDoubt(s, 1001, 0)
		}))},
		{name: "devices, with a queue", r: &lock.Report{Path: renderDir + "gpu.lock",
			Locks: []*lock.Status{device0, free("gpu1.lock", "1")}, Queue: queue}},
	}
}

// status's text and --json object for every kind of lock, byte for byte
// as testdata/status_render.golden has them: "-- name --", the text, the
// object. {since} there is the record's acquiredAt, 2026-10-12T20:18:03Z,
// in local time ("2006-01-02 15:04:05"); {wsince} a waiter's, 20:21:05Z
// ("15:04:05"). A lock that is not free has clear's refusal after its
// text ("clear: ").
func TestStatusRendering(t *testing.T) {
	since := time.Date(2026, 10, 12, 20, 18, 3, 0, time.UTC).Local().Format("2006-01-02 15:04:05")
	wsince := time.Date(2026, 10, 12, 20, 21, 5, 0, time.UTC).Local().Format("15:04:05")
	var got strings.Builder
	for _, c := range renderCases() {
		text, obj := renderText(c.r, c.beside), renderObject(t, c.r, c.beside)
		if len(c.r.Locks) == 1 && c.r.Locks[0].State != lock.StateFree {
			text += "\nclear: " + notCleared(c.r.Locks[0])
		}
		text = strings.ReplaceAll(strings.ReplaceAll(text, since, "{since}"), wsince, "{wsince}")
		got.WriteString("-- " + c.name + " --\n" + text + "\n" + obj + "\n")
	}
	out := got.String()
	const golden = "testdata/status_render.golden"
	if *updateRender {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("status's text and JSON differ from %s:\n%s", golden, out)
	}
}

// updateRender rewrites the golden file from what status renders now.
var updateRender = flag.Bool("update-render", false, "rewrite testdata/status_render.golden")

func renderText(r *lock.Report, beside []*lock.Status) string { return describeReport(r, beside) }

func renderObject(t *testing.T, r *lock.Report, beside []*lock.Status) string {
	b, err := json.Marshal(jsonWithBeside(r, beside))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func setDoubt(s *lock.Status, record, group int) {
	s.JobGroupDoubt = "its record is uid 1001's but names process group 4250, which runs as uid 0"
}
