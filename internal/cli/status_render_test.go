package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
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
		// The locks' folder is named as the OS writes it (\srv\gpuexec on
		// Windows); the golden file has it as on Unix.
		text = strings.ReplaceAll(text, " in "+filepath.Dir("/srv/gpuexec/gpu.lock"), " in /srv/gpuexec")
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

func renderText(r *lock.Report, beside []*lock.Status) string {
	r.Beside = beside
	return describeReport(r)
}

func renderObject(t *testing.T, r *lock.Report, beside []*lock.Status) string {
	r.Beside = beside
	b, err := json.Marshal(statusObject(r, nil, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func setDoubt(s *lock.Status, record, group int) {
	s.JobGroupDoubt = &lock.ForeignGroup{RecordUID: record, GroupUID: group}
}

// The text and JSON of a lock kept held by a job whose record was removed,
// and of a sidecar this user may not read, byte for byte (the lines of
// lock.Status.Describe and lock.Status.JSON when lock rendered them).
func TestLockLineOfOrphanAndUnopened(t *testing.T) {
	mod := time.Date(2026, 10, 12, 20, 18, 8, 0, time.UTC)
	for _, c := range []struct {
		st        *lock.Status
		text, obj string
	}{
		{&lock.Status{State: lock.StateHeld, Path: "/srv/gpuexec/gpu.lock", Alive: true, ModTime: mod, HeartbeatAge: 5 * time.Second,
			Reason: "the liveness file gpu.lock.live.0123456789abcdef is locked: a job whose record was removed still runs",
			Orphan: "/srv/gpuexec/gpu.lock.live.0123456789abcdef", OrphanGroup: 4250},
			"held by a job whose lock record was removed (process group 4250), alive (the liveness file gpu.lock.live.0123456789abcdef is locked: a job whose record was removed still runs)",
			`{"alive":true,"childPgid":4250,"heartbeatAgeSeconds":null,"liveFile":"/srv/gpuexec/gpu.lock.live.0123456789abcdef","modTime":"2026-10-12T20:18:08.000Z","note":"the liveness file gpu.lock.live.0123456789abcdef is locked: a job whose record was removed still runs","path":"/srv/gpuexec/gpu.lock","staleReason":null,"state":"held"}`},
		{&lock.Status{State: lock.StateHeld, Path: "/srv/gpuexec/gpu.lock", Alive: true, ModTime: mod, HeartbeatAge: 5 * time.Second,
			Reason: "locked", Orphan: "/srv/gpuexec/gpu.lock.live.0123456789abcdef"},
			"held by a job whose lock record was removed, alive (locked)",
			`{"alive":true,"heartbeatAgeSeconds":null,"liveFile":"/srv/gpuexec/gpu.lock.live.0123456789abcdef","modTime":"2026-10-12T20:18:08.000Z","note":"locked","path":"/srv/gpuexec/gpu.lock","staleReason":null,"state":"held"}`},
		{&lock.Status{State: lock.StateHeld, Path: "/srv/gpuexec/gpu.lock", Alive: true, ModTime: mod, HeartbeatAge: 5 * time.Second,
			Info:    &lock.Info{PID: 4242, Owner: "channels", Slug: "ep12", Share: true},
			Sharers: []lock.Sharer{{MiB: -1, Unopened: true}, {PID: 4300, Owner: "reels", Slug: "tts", MiB: 512}}},
			"held by channels/ep12 (pid 4242), heartbeat 5s ago, alive\n  shared: unknown of budgets by 2 job(s)\n    a sharer whose sidecar this user may not read: budget unknown\n    reels/tts (pid 4300): budget 512 MiB",
			`{"alive":true,"budgetUsedMiB":null,"heartbeatAgeSeconds":5,"modTime":"2026-10-12T20:18:08.000Z","path":"/srv/gpuexec/gpu.lock","sharers":[{"pid":0,"owner":"","slug":"","vramMiB":-1,"since":""},{"pid":4300,"owner":"reels","slug":"tts","vramMiB":512,"since":""}],"staleReason":null,"state":"held"}`},
	} {
		b, err := json.Marshal(lockObject(c.st))
		if text := lockLine(c.st); text != c.text || err != nil || string(b) != c.obj {
			t.Errorf("got\n%s\n%s\nwant\n%s\n%s", text, b, c.text, c.obj)
		}
	}
}

// A sharer whose processes are not attributed to it (Unattributed) is one
// of the sharers: its budget in the sum, and why shown beside it.
func TestShareUnattributedIsShownAmongTheSharers(t *testing.T) {
	const why = "its file has 2 links"
	st := &lock.Status{State: lock.StateHeld, Path: "gpu.lock", Alive: true, Info: &lock.Info{PID: 7, Owner: "a", Slug: "x", Share: true},
		Sharers: []lock.Sharer{{PID: 7, Owner: "a", Slug: "x", MiB: 2048}, {PID: 8, Owner: "b", Slug: "y", MiB: 1024, Unattributed: why}}}
	if d := lockLine(st); !strings.Contains(d, "shared: 3.0 GiB of budgets by 2 job(s)") ||
		!strings.Contains(d, "b/y (pid 8): budget 1.0 GiB; its processes not attributed: "+why) ||
		strings.Count(d, "not attributed") != 1 {
		t.Errorf("Describe:\n%s", d)
	}
	m := lockObject(st)
	if m["budgetUsedMiB"] != int64(3072) || m["notCounted"] != nil {
		t.Errorf("JSON: budgetUsedMiB %v, notCounted %v", m["budgetUsedMiB"], m["notCounted"])
	}
	b, err := json.Marshal(m["sharers"])
	if err != nil || strings.Count(string(b), `"unattributed":"`+why+`"`) != 1 {
		t.Errorf("JSON sharers: %s %v", b, err)
	}
}

// countingBackend is a backend whose Inspect returns report, counting the
// calls; nothing else of it may be used.
type countingBackend struct {
	lock.Backend
	report   *lock.Report
	inspects int
}

func (b *countingBackend) Inspect(lock.Options) (*lock.Report, error) {
	b.inspects++
	return b.report, nil
}

// One status reads the lock once: its text, the device locks beside it,
// the attribution of the cards' processes to its holder, --json and
// --check all come from the one report Inspect returned (here made up:
// the folder is empty, so anything read from it again would say free,
// with nothing beside it and nobody's job on the card).
func TestStatusReadsTheLockOnce(t *testing.T) {
	dir := t.TempDir()
	pid := os.Getpid()
	holder := func(path, device string) *lock.Status {
		return &lock.Status{State: lock.StateHeld, Path: path, Device: device, Alive: true, HeartbeatAge: time.Second,
			Info: &lock.Info{PID: pid, Owner: "channels", Slug: "ep12", Token: "0123456789abcdef", Cover: device == ""}}
	}
	path := filepath.Join(dir, "gpu.lock")
	report := &lock.Report{Path: path, Locks: []*lock.Status{holder(path, "")},
		Beside: []*lock.Status{holder(filepath.Join(dir, "gpu0.lock"), "0")}}
	c := newCard(t, frame(rtx3080(9000), gputest.App{GPU: gputest.UUID0, PID: pid, Name: "/usr/bin/python3", Used: "8800"}))
	t.Setenv(gputest.Env, c.fixture)
	for _, args := range [][]string{{}, {"--json"}, {"--check"}} {
		set := flag.NewFlagSet("status", flag.ContinueOnError)
		set.Bool("json", false, "")
		set.Bool("check", false, "")
		set.String("reserve", "", "")
		set.String("nvidia-smi", helperBin, "")
		if err := set.Parse(args); err != nil {
			t.Fatal(err)
		}
		b := &countingBackend{report: report}
		var out strings.Builder
		err := showStatus(cli.NewContext(cli.NewApp(), set, nil), &out, lock.Options{Path: path}, b)
		if b.inspects != 1 {
			t.Errorf("status %v read the lock %d times, want once", args, b.inspects)
		}
		job := fmt.Sprintf("under gpuexec channels/ep12 (pid %d)", pid)
		switch {
		case len(args) == 0 && (err != nil || !strings.Contains(out.String(), "its GPUs are held beside it: gpu0.lock by channels/ep12") ||
			!strings.Contains(out.String(), job)):
			t.Errorf("status: %v\n%s", err, out.String())
		case len(args) > 0 && args[0] == "--json" && (err != nil || !strings.Contains(out.String(), `"devicesBeside":[{`) ||
			!strings.Contains(out.String(), `"job":{"owner":"channels","slug":"ep12","pid":`)):
			t.Errorf("status --json: %v\n%s", err, out.String())
		case len(args) > 0 && args[0] == "--check":
			var ec cli.ExitCoder
			if !errors.As(err, &ec) || ec.ExitCode() != checkHeld {
				t.Errorf("status --check: %v, want %d: its GPUs are held beside it", err, checkHeld)
			}
		}
	}
}

// A job group's doubt whose uids were not told (-1: a helper's line of
// another form, see lock.ForeignGroup) still says the group is not
// vouched for, in text and JSON, and names no uid -1.
func TestDoubtWithUidsUntold(t *testing.T) {
	st := renderHeld(4242)
	st.HolderProcess, st.JobGroup, st.JobProcess = lock.ProcGone, 4250, lock.ProcRunning
	setDoubt(st, -1, -1)
	r := &lock.Report{Path: st.Path, Locks: []*lock.Status{st}}
	text, obj := renderText(r, nil), renderObject(t, r, nil)
	for _, s := range []string{text, obj} {
		if strings.Contains(s, "uid -1") || strings.Contains(s, "kill -- -4250") || !strings.Contains(s, "process group 4250") {
			t.Errorf("a doubt with its uids untold:\n%s", s)
		}
	}
}
