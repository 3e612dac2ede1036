package etcdhelper

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/lock"
)

// The protocol's lines are pinned, byte for byte, by the files in
// testdata/protocol: one per message, as the side that sends it writes it.
// A gpuexec and a gpuexec-etcd of one protocol version but of different
// builds must understand each other, so a change here is a change of the
// protocol (and of Protocol), never a side effect of renaming a field.
// go test -run TestProtocolGolden -update rewrites them.

var update = flag.Bool("update", false, "rewrite testdata/protocol from the fixtures")

const goldenDir = "testdata/protocol"

// fixtureInfo is a holder's record with every field set.
func fixtureInfo() lock.Info {
	return lock.Info{PID: 4242, AcquiredAt: "2026-10-12T12:18:03.512Z", Owner: "ana", Slug: "train-7",
		Token: "0123456789abcdef", Host: "render-1", PIDStart: 1791000000123, ChildPGID: 4250,
		ChildStart: 1791000000456, Share: true, Cover: true, Deadline: "2026-10-12T14:18:03.512Z"}
}

// fixtureStatus is a held lock as judged, with every field set.
func fixtureStatus() *lock.Status {
	info := fixtureInfo()
	return &lock.Status{
		State: lock.StateHeld, Path: "etcd://10.0.0.1:2379/gpuexec/box", Device: "0", Info: &info,
		Fields:       map[string]any{"pid": float64(4242), "extra": "kept", "nested": map[string]any{"a": []any{float64(1), "b"}}},
		Content:      []byte(`{"pid":4242,"extra":"kept"}`),
		ModTime:      time.Date(2026, 10, 12, 12, 18, 3, 512_000_000, time.UTC),
		HeartbeatAge: 1500 * time.Millisecond, Alive: true, Reason: "kept held by its job's processes",
		Sharers: []lock.Sharer{{PID: 4243, Owner: "bo", Slug: "eval", Host: "render-1", PIDStart: 1791000000789,
			ChildPGID: 4260, ChildStart: 1791000000999, Gone: true, MiB: 8192, Since: "2026-10-12T12:19:00.000Z",
			UsedMiB: 9000, Over: true, Lock: "fedcba9876543210", Unattributed: "not its owner's"}},
		HolderProcess: lock.ProcRunning, JobGroup: 4250, JobProcess: lock.ProcStopped,
		JobGroupDoubt: &lock.ForeignGroup{RecordUID: 1001, GroupUID: 0},
	}
}

// fixtureFree is a free lock as judged: the fewest fields.
func fixtureFree() *lock.Status {
	return &lock.Status{State: lock.StateFree, Path: "etcd://10.0.0.1:2379/gpuexec/box"}
}

func fixtureReport() *lock.Report {
	return &lock.Report{Path: "etcd://10.0.0.1:2379/gpuexec/box", Locks: []*lock.Status{fixtureStatus()},
		Queue: []lock.Waiter{
			{Position: 1, Seq: 17, PID: 4244, Owner: "cy", Slug: "sweep", Host: "render-2",
				Since: "2026-10-12T12:20:00.000Z", Locks: []string{"gpu0.lock"}, Alive: true, Process: lock.ProcUnknown},
			{Position: 2, Seq: 19, PID: 4245, Owner: "di", Slug: "", Since: "2026-10-12T12:21:00.000Z"},
		}}
}

// fixtureRequest is what open sends for op, with every option set.
func fixtureRequest(op string) request {
	return request{Op: op, Path: "etcd://10.0.0.1:2379/gpuexec/box", Owner: "ana", Slug: "train-7",
		Report: 30 * time.Second, Stale: 90 * time.Second, Heartbeat: 5 * time.Second, Poll: time.Second,
		HoldLimit: 2 * time.Hour, Level: "info"}
}

// requestFixtures are the lines from the user to the helper.
func requestFixtures() map[string]request {
	clear := fixtureRequest("clear")
	clear.Force = true
	try := fixtureRequest("hold")
	try.Live = true
	wait := try
	wait.Wait = true
	return map[string]request{
		"request-hello":   {Op: "hello", Protocol: Protocol},
		"request-status":  fixtureRequest("status"),
		"request-clear":   clear,
		"request-try":     try,
		"request-wait":    wait,
		"request-cancel":  {Op: "cancel"},
		"request-note":    {Op: "note", PGID: 4250},
		"request-child":   {Op: "child", PGID: 4250},
		"request-release": {Op: "release"},
	}
}

// eventFixtures are the lines from the helper to the user.
func eventFixtures() map[string]event {
	info := fixtureInfo()
	return map[string]event{
		"event-hello": {Event: "hello", Protocol: Protocol},
		"event-log": {Event: "log", Level: "warn", Msg: "etcd error while waiting for the GPU lock; still trying",
			Args: []any{"path", "etcd://10.0.0.1:2379/gpuexec/box", "waited", "3s", "tries", float64(3), "first", true, "none", nil}},
		"event-lost":   {Event: "lost", Error: "the lock's key in etcd was deleted (gpuexec clear --force?)"},
		"event-report": {Event: "report", Report: toWireReport(fixtureReport())},
		"event-report-free": {Event: "report", Report: toWireReport(&lock.Report{Path: "etcd://10.0.0.1:2379/gpuexec/box",
			Locks: []*lock.Status{fixtureFree()}})},
		"event-cleared":          {Event: "cleared", Status: toWireStatus(fixtureFree())},
		"event-cleared-refused":  {Event: "cleared", Status: toWireStatus(fixtureStatus()), Error: "lock: held by ana", Kind: "held"},
		"event-held":             {Event: "held", Info: toWireInfo(&info)},
		"event-busy":             {Event: "busy", Seen: toWireStatuses([]*lock.Status{fixtureStatus()})},
		"event-waited":           {Event: "waited", Seen: toWireStatuses([]*lock.Status{fixtureStatus(), fixtureFree()}), Waited: 90 * time.Second},
		"event-waited-cancelled": {Event: "waited"},
		"event-error":            {Event: "error", Error: "lock: etcd at 10.0.0.1:2379 did not answer", Kind: "unreachable"},
		"event-error-invalid":    {Event: "error", Error: "lock: unknown request \"x\"", Kind: "invalid"},
		"event-error-version":    {Event: "error", Error: "gpuexec and gpuexec-etcd are from different releases", Kind: "version"},
		"event-error-plain":      {Event: "error", Error: "etcd lock: recording the job: the lock's key is no longer ours"},
		"event-ok":               {Event: "ok"},
		"event-released":         {Event: "released"},
		"event-released-error":   {Event: "released", Error: "lock: release: context deadline exceeded"},
	}
}

// written is a line as its side writes it: requests as conn.send, events
// as server.send.
func writtenRequest(t *testing.T, r request) []byte {
	var buf bytes.Buffer
	c := &conn{w: nopCloser{&buf}}
	if err := c.send(r); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writtenEvent(ev event) []byte {
	var buf bytes.Buffer
	(&server{enc: json.NewEncoder(&buf)}).send(ev)
	return buf.Bytes()
}

type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }

func TestProtocolGolden(t *testing.T) {
	lines := map[string][]byte{}
	for name, r := range requestFixtures() {
		lines[name] = writtenRequest(t, r)
	}
	for name, ev := range eventFixtures() {
		lines[name] = writtenEvent(ev)
	}
	if *update {
		if err := os.RemoveAll(goldenDir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range lines {
			if err := os.WriteFile(filepath.Join(goldenDir, name+".json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	sort.Strings(names)
	for _, name := range names {
		if _, ok := lines[name]; !ok {
			t.Errorf("%s/%s.json pins no message of the fixtures", goldenDir, name)
		}
	}
	for name, got := range lines {
		want, err := os.ReadFile(filepath.Join(goldenDir, name+".json"))
		if err != nil {
			t.Errorf("%s: %v (go test -run TestProtocolGolden -update writes it)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the line on the wire changed:\n got %s\nwant %s", name, got, want)
		}
	}
}

// Each side reads the other's lines back as they were sent.
func TestProtocolGoldenReadsBack(t *testing.T) {
	for name, want := range requestFixtures() {
		var got request
		if err := json.Unmarshal(golden(t, name), &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s read back as\n%+v\nwant\n%+v", name, got, want)
		}
	}
	for name, want := range eventFixtures() {
		var got event
		if err := json.Unmarshal(golden(t, name), &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s read back as\n%+v\nwant\n%+v", name, got, want)
		}
	}
}

func golden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
