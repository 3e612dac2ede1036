package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/metrics/metricstest"
	"github.com/gpuexec/gpuexec/lock"
)

var at = time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC)

const lockPath = "/srv/gpu/gpu.lock"

// text is s's metrics as `gpuexec metrics` prints them, failing t unless
// they are byte for byte what client_golang writes of them.
func text(t *testing.T, s Snapshot) string {
	t.Helper()
	return writeText(t, Families(s))
}

func k(name string, labels ...string) string { return metricstest.Key(name, labels...) }

func free(path, device string) *lock.Status {
	return &lock.Status{State: lock.StateFree, Path: path, Device: device}
}

func held(path, device string, acquired, beat time.Duration) *lock.Status {
	return &lock.Status{State: lock.StateHeld, Path: path, Device: device, Alive: true,
		Info:    &lock.Info{PID: 7, Owner: "ana", AcquiredAt: at.Add(-acquired).Format("2006-01-02T15:04:05.000Z")},
		ModTime: at.Add(-beat), HeartbeatAge: beat}
}

func waiter(pos int, waited time.Duration, alive bool) lock.Waiter {
	return lock.Waiter{Position: pos, Owner: "bo", Since: at.Add(-waited).Format("2006-01-02T15:04:05.000Z"), Alive: alive}
}

// lockOnly are the metrics of a free lock with no queue, no GPU, no journal.
func lockOnly(l ...string) metricstest.Samples {
	return metricstest.Samples{
		k("gpuexec_lock_held", l...): 0, k("gpuexec_lock_stale", l...): 0,
		k("gpuexec_queue_length", "lock", lockPath): 0, k("gpuexec_queue_oldest_wait_seconds", "lock", lockPath): 0,
		"gpuexec_gpus_readable": 0,
	}
}

func with(s metricstest.Samples, more metricstest.Samples) metricstest.Samples {
	out := metricstest.Samples{}
	for k, v := range s {
		out[k] = v
	}
	for k, v := range more {
		out[k] = v
	}
	return out
}

func rec(owner string, o journal.Outcome, waited, held time.Duration) journal.Record {
	return journal.Record{V: journal.Version, Owner: owner, Outcome: o, WaitedMS: waited.Milliseconds(), HeldMS: held.Milliseconds()}
}

// jobs are the jobs_total series of owner: n[i] jobs of journal.Outcomes[i].
func jobs(owner string, held, waited float64, n ...float64) metricstest.Samples {
	s := metricstest.Samples{
		k("gpuexec_job_held_seconds_total", "owner", owner):   held,
		k("gpuexec_job_waited_seconds_total", "owner", owner): waited,
	}
	for i, o := range journal.Outcomes {
		v := 0.0
		if i < len(n) {
			v = n[i]
		}
		s[k("gpuexec_jobs_total", "owner", owner, "outcome", string(o))] = v
	}
	return s
}

func TestMetrics(t *testing.T) {
	one := []string{"lock", lockPath, "device", ""}
	dev := func(d string) []string { return []string{"lock", "/srv/gpu/gpu" + d + ".lock", "device", d} }
	cards := []gpu.Card{
		{Device: gpu.Device{Index: 0, UUID: "GPU-aaaa", Memory: gpu.Memory{Total: 10240, Used: 1024, Free: 9216}}},
		{Device: gpu.Device{Index: 1, UUID: "GPU-bbbb", Memory: gpu.Memory{Total: 81920, Used: gpu.Unknown, Free: gpu.Unknown}}},
	}
	const mib = 1 << 20
	tests := []struct {
		name string
		s    Snapshot
		want metricstest.Samples
	}{
		{"free lock", Snapshot{At: at, Report: &lock.Report{Path: lockPath, Locks: []*lock.Status{free(lockPath, "")}}},
			lockOnly(one...)},
		{"held, with a queue", Snapshot{At: at, Report: &lock.Report{Path: lockPath,
			Locks: []*lock.Status{held(lockPath, "", 90*time.Second, 2*time.Second)},
			Queue: []lock.Waiter{waiter(1, 30*time.Second, true), waiter(2, 10*time.Second, true), waiter(3, time.Hour, false)}}},
			with(lockOnly(one...), metricstest.Samples{
				k("gpuexec_lock_held", one...): 1, k("gpuexec_lock_held_seconds", one...): 90, k("gpuexec_lock_heartbeat_age_seconds", one...): 2,
				k("gpuexec_queue_length", "lock", lockPath): 2, k("gpuexec_queue_oldest_wait_seconds", "lock", lockPath): 30,
			})},
		{"a holder without acquiredAt", Snapshot{At: at, Report: &lock.Report{Path: lockPath,
			Locks: []*lock.Status{{State: lock.StateHeld, Path: lockPath, Info: &lock.Info{AcquiredAt: "yesterday"}, ModTime: at, HeartbeatAge: 0}}}},
			with(lockOnly(one...), metricstest.Samples{k("gpuexec_lock_held", one...): 1, k("gpuexec_lock_heartbeat_age_seconds", one...): 0})},
		{"devices, one stale", Snapshot{At: at, Report: &lock.Report{Path: lockPath, Locks: []*lock.Status{
			{State: lock.StateStale, Path: "/srv/gpu/gpu0.lock", Device: "0", ModTime: at.Add(-time.Hour), HeartbeatAge: time.Hour},
			held("/srv/gpu/gpu1.lock", "1", time.Minute, time.Second)}}},
			metricstest.Samples{
				k("gpuexec_lock_held", dev("0")...): 0, k("gpuexec_lock_stale", dev("0")...): 1, k("gpuexec_lock_heartbeat_age_seconds", dev("0")...): 3600,
				k("gpuexec_lock_held", dev("1")...): 1, k("gpuexec_lock_stale", dev("1")...): 0, k("gpuexec_lock_heartbeat_age_seconds", dev("1")...): 1,
				k("gpuexec_lock_held_seconds", dev("1")...): 60,
				k("gpuexec_queue_length", "lock", lockPath): 0, k("gpuexec_queue_oldest_wait_seconds", "lock", lockPath): 0,
				"gpuexec_gpus_readable": 0,
			}},
		{"a device lock beside", Snapshot{At: at, Report: &lock.Report{Path: lockPath, Locks: []*lock.Status{free(lockPath, "")},
			Beside: []*lock.Status{held("/srv/gpu/gpu1.lock", "1", time.Minute, time.Second)}}},
			with(lockOnly(one...), metricstest.Samples{
				k("gpuexec_lock_held", dev("1")...): 1, k("gpuexec_lock_stale", dev("1")...): 0, k("gpuexec_lock_heartbeat_age_seconds", dev("1")...): 1,
				k("gpuexec_lock_held_seconds", dev("1")...): 60,
			})},
		{"cards", Snapshot{At: at, Cards: cards, CardsRead: true}, metricstest.Samples{
			"gpuexec_gpus_readable": 1,
			k("gpuexec_gpu_memory_total_bytes", "gpu", "0", "uuid", "GPU-aaaa"): 10240 * mib,
			k("gpuexec_gpu_memory_used_bytes", "gpu", "0", "uuid", "GPU-aaaa"):  1024 * mib,
			k("gpuexec_gpu_memory_free_bytes", "gpu", "0", "uuid", "GPU-aaaa"):  9216 * mib,
			k("gpuexec_gpu_memory_total_bytes", "gpu", "1", "uuid", "GPU-bbbb"): 81920 * mib,
		}},
		{"no GPU", Snapshot{At: at, Cards: []gpu.Card{}, CardsRead: true}, metricstest.Samples{"gpuexec_gpus_readable": 1}},
		{"cards unread", Snapshot{At: at, Cards: cards}, metricstest.Samples{"gpuexec_gpus_readable": 0}},
		{"journal", Snapshot{At: at, Journal: &journal.Read{
			Files:    []string{"/srv/gpu/gpu.lock.journal", "/srv/gpu/gpu.lock.journal.1"},
			SetAside: map[string]int{"not JSON": 2, "invalid": 1},
			Records: []journal.Record{
				rec("ana", journal.OK, time.Second, time.Minute), rec("ana", journal.OK, 2*time.Second, time.Minute),
				rec("ana", journal.Failed, 0, 1500*time.Millisecond), rec("bo", journal.Deferred, time.Hour, 0),
			}}},
			with(with(jobs("ana", 121.5, 3, 2, 1), jobs("bo", 0, 3600, 0, 0, 0, 1)), metricstest.Samples{
				"gpuexec_gpus_readable": 0, "gpuexec_journal_readable": 1, "gpuexec_journal_files": 2, "gpuexec_journal_truncated": 0,
				k("gpuexec_journal_set_aside_lines", "reason", "not JSON"): 2, k("gpuexec_journal_set_aside_lines", "reason", "invalid"): 1,
			})},
		{"journal missing", Snapshot{At: at, Journal: &journal.Read{Missing: []string{"/x"}, Truncated: true}}, metricstest.Samples{
			"gpuexec_gpus_readable": 0, "gpuexec_journal_readable": 1, "gpuexec_journal_files": 0, "gpuexec_journal_truncated": 1,
		}},
		{"journal unreadable", Snapshot{At: at, Journal: &journal.Read{Files: []string{"/x"}}, JournalFailed: true}, metricstest.Samples{
			"gpuexec_gpus_readable": 0, "gpuexec_journal_readable": 0,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := metricstest.Parse(t, text(t, tc.s))
			for key, v := range tc.want {
				if g, ok := got[key]; !ok {
					t.Errorf("%s missing", key)
				} else if g != v {
					t.Errorf("%s = %v, want %v", key, g, v)
				}
			}
			for key, v := range got {
				if _, ok := tc.want[key]; !ok {
					t.Errorf("%s = %v, not wanted", key, v)
				}
			}
		})
	}
}

func TestLabel(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	tests := []struct{ in, want string }{
		{"ana", "ana"},
		{"", ""},
		{"a\nb", `a\nb`},
		{"\x1b[31mred", `\x1b[31mred`},
		{"bad\xffutf8", `bad\xffutf8`},
		{`<script>alert("x")</script>`, `<script>alert("x")</script>`},
		{"rtl\u202etxt", `rtl\u202etxt`},
		{long, strings.Repeat("é", 64)},
		{"a" + long, "a" + strings.Repeat("é", 63)},
	}
	for _, tc := range tests {
		got := Label(tc.in)
		if got != tc.want {
			t.Errorf("Label(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if len(got) > MaxLabel || !utf8.ValidString(got) {
			t.Errorf("Label(%q) = %q: %d bytes, valid UTF-8 %v", tc.in, got, len(got), utf8.ValidString(got))
		}
	}
}

// Hostile owners (newlines, quotes, HTML, invalid UTF-8, names that cut
// alike) still give metrics that parse, each owner's jobs under its label.
func TestHostileOwners(t *testing.T) {
	long := strings.Repeat("x", 300)
	owners := []string{"a\nb", `say "hi" \ bye`, "<b onclick=alert(1)>", "\xff\xfe", long, long + "y", "# HELP x y", "other"}
	rd := &journal.Read{}
	for _, o := range owners {
		rd.Records = append(rd.Records, rec(o, journal.OK, 0, time.Second))
	}
	got, _ := metricstest.Parse(t, text(t, Snapshot{At: at, Journal: rd}))
	want := map[string]float64{}
	for _, o := range owners {
		want[Label(o)]++
	}
	if len(want) != len(owners)-1 {
		t.Fatalf("the two long owners should cut alike: %d labels", len(want))
	}
	for l, n := range want {
		if v := got[k("gpuexec_jobs_total", "owner", l, "outcome", "ok")]; v != n {
			t.Errorf("owner %q: %v ok jobs, want %v", l, v, n)
		}
		if v := got[k("gpuexec_job_held_seconds_total", "owner", l)]; v != n {
			t.Errorf("owner %q: held %v s, want %v", l, v, n)
		}
	}
}

// The owners beyond MaxOwners are counted under Other: the series stay
// bounded and no job is lost from the totals.
func TestOwnerCap(t *testing.T) {
	rd := &journal.Read{}
	const n = MaxOwners + 50
	for i := range n {
		// Owner i has i+1 jobs: the MaxOwners with the most are kept.
		for range i + 1 {
			rd.Records = append(rd.Records, rec(fmt.Sprintf("user%03d", i), journal.OK, time.Second, 0))
		}
	}
	got, _ := metricstest.Parse(t, text(t, Snapshot{At: at, Journal: rd}))
	series, total := 0, 0.0
	for key, v := range got {
		if strings.HasPrefix(key, "gpuexec_jobs_total{") && strings.Contains(key, `outcome="ok"`) {
			series++
			total += v
		}
	}
	if series != MaxOwners+1 {
		t.Errorf("%d owners, want %d and %s", series, MaxOwners, Other)
	}
	if total != float64(len(rd.Records)) {
		t.Errorf("%v jobs in all, want %d", total, len(rd.Records))
	}
	if _, ok := got[k("gpuexec_jobs_total", "owner", "user049", "outcome", "ok")]; ok {
		t.Error("user049, with few jobs, has series of its own")
	}
	if v := got[k("gpuexec_jobs_total", "owner", fmt.Sprintf("user%03d", n-1), "outcome", "ok")]; v != n {
		t.Errorf("the busiest owner has %v jobs, want %d", v, n)
	}
	if v := got[k("gpuexec_jobs_total", "owner", Other, "outcome", "ok")]; v != 50*51/2 {
		t.Errorf("%s has %v jobs, want %d", Other, v, 50*51/2)
	}
	if v := got[k("gpuexec_job_waited_seconds_total", "owner", Other)]; v != 50*51/2 {
		t.Errorf("%s waited %v s, want %d", Other, v, 50*51/2)
	}
}
