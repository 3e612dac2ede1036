package lock

import (
	"strings"
	"testing"
	"time"
)

// fakeProber answers liveness questions from tables.
type fakeProber struct {
	alivePIDs map[int]bool
	starts    map[int]int64
	groups    map[int]bool
	live      map[string]bool     // token -> held; absent: no liveness file
	noted     map[string]jobGroup // token -> group noted in its liveness file
}

func (f fakeProber) alive(pid int) bool { return f.alivePIDs[pid] }
func (f fakeProber) startTime(pid int) (int64, bool) {
	s, ok := f.starts[pid]
	return s, ok
}
func (f fakeProber) groupAlive(g jobGroup) bool { return f.groups[g.id] }
func (f fakeProber) liveHeld(token string) (held, known bool, group jobGroup) {
	held, known = f.live[token]
	if known && !held {
		group = f.noted[token]
	}
	return held, known, group
}

func TestJudge(t *testing.T) {
	now := time.Date(2026, 10, 12, 20, 18, 0, 0, time.UTC)
	const staleAfter = 90 * time.Minute
	live := fakeProber{alivePIDs: map[int]bool{100: true}, starts: map[int]int64{100: 5_000}}
	dead := fakeProber{}
	rec := func(mod func(*Info)) *Info {
		i := &Info{PID: 100, Token: "0123456789abcdef", Owner: "o", Slug: "s"}
		if mod != nil {
			mod(i)
		}
		return i
	}
	tests := []struct {
		name   string
		info   *Info // nil: content did not parse
		age    time.Duration
		p      prober
		want   State
		reason string // substring of Reason
	}{
		{"live holder", rec(nil), time.Minute, live, StateHeld, ""},
		{"live holder, no heartbeat for long", rec(nil), 91 * time.Minute, live, StateStale, "no heartbeat for 1h31m0s"},
		{"heartbeat exactly at the limit is held", rec(nil), staleAfter, live, StateHeld, ""},
		{"pid gone", rec(nil), time.Minute, dead, StateStale, "pid 100 is gone"},
		{"pid gone, young lock", rec(nil), 0, dead, StateStale, "pid 100 is gone"},
		{"pid recycled", rec(func(i *Info) { i.PIDStart = 1_000_000 }), time.Minute, live, StateStale, "now belongs to another process"},
		{"pid start within tolerance", rec(func(i *Info) { i.PIDStart = 5_500 }), time.Minute, live, StateHeld, ""},
		{"pid start unreadable counts as alive", rec(func(i *Info) { i.PIDStart = 1_000_000 }), time.Minute,
			fakeProber{alivePIDs: map[int]bool{100: true}}, StateHeld, ""},
		{"pid gone but job group runs", rec(func(i *Info) { i.ChildPGID = 200 }), time.Minute,
			fakeProber{groups: map[int]bool{200: true}}, StateHeld, "(process group 200) is still running"},
		{"pid gone and job group gone", rec(func(i *Info) { i.ChildPGID = 200 }), time.Minute, dead, StateStale, "pid 100 is gone"},
		{"job group cannot outlive the heartbeat", rec(func(i *Info) { i.ChildPGID = 200 }), 2 * time.Hour,
			fakeProber{groups: map[int]bool{200: true}}, StateStale, "no heartbeat"},
		{"other host: pid not checked", rec(func(i *Info) { i.Host = "render-box-2" }), time.Minute, dead, StateHeld, "render-box-2"},
		{"other host: heartbeat still counts", rec(func(i *Info) { i.Host = "render-box-2" }), 2 * time.Hour, dead, StateStale, "no heartbeat"},
		{"mtime in the future", rec(nil), -time.Hour, live, StateHeld, ""},
		{"liveness lock held, pid gone", rec(nil), time.Minute,
			fakeProber{live: map[string]bool{"0123456789abcdef": true}}, StateHeld, ""},
		{"liveness lock held, pid recycled", rec(func(i *Info) { i.PIDStart = 1_000_000 }), time.Minute,
			fakeProber{alivePIDs: map[int]bool{100: true}, starts: map[int]int64{100: 5_000}, live: map[string]bool{"0123456789abcdef": true}}, StateHeld, ""},
		{"liveness lock free, pid gone", rec(nil), time.Minute,
			fakeProber{live: map[string]bool{"0123456789abcdef": false}}, StateStale, "liveness lock is free"},
		{"liveness lock free, pid recycled without a start time", rec(nil), time.Minute,
			fakeProber{alivePIDs: map[int]bool{100: true}, live: map[string]bool{"0123456789abcdef": false}}, StateStale, "liveness lock is free"},
		{"liveness lock free, job group runs", rec(func(i *Info) { i.ChildPGID = 200 }), time.Minute,
			fakeProber{live: map[string]bool{"0123456789abcdef": false}, groups: map[int]bool{200: true}}, StateHeld, "still running"},
		{"liveness lock free, job group noted in it runs", rec(nil), time.Minute,
			fakeProber{live: map[string]bool{"0123456789abcdef": false}, noted: map[string]jobGroup{"0123456789abcdef": {id: 300}}, groups: map[int]bool{300: true}},
			StateHeld, "process group 300"},
		{"liveness lock free, job group noted in it gone", rec(nil), time.Minute,
			fakeProber{live: map[string]bool{"0123456789abcdef": false}, noted: map[string]jobGroup{"0123456789abcdef": {id: 300}}}, StateStale, "liveness lock is free"},
		{"the record's group goes before the noted one", rec(func(i *Info) { i.ChildPGID = 200 }), time.Minute,
			fakeProber{live: map[string]bool{"0123456789abcdef": false}, noted: map[string]jobGroup{"0123456789abcdef": {id: 300}}, groups: map[int]bool{200: true}},
			StateHeld, "process group 200"},
		{"liveness lock held, no heartbeat for long (stopped, clock jump)", rec(nil), 2 * time.Hour,
			fakeProber{live: map[string]bool{"0123456789abcdef": true}}, StateHeld, "its liveness lock is held"},
		{"liveness lock held, heartbeat far in the past, pid gone", rec(nil), 1000 * time.Hour,
			fakeProber{live: map[string]bool{"0123456789abcdef": true}}, StateHeld, "its liveness lock is held"},
		{"liveness lock free, no heartbeat for long", rec(nil), 2 * time.Hour,
			fakeProber{alivePIDs: map[int]bool{100: true}, live: map[string]bool{"0123456789abcdef": false}}, StateStale, "no heartbeat"},
		{"other host name, liveness lock held in this kernel (a container), no heartbeat for long", rec(func(i *Info) { i.Host = "container-a" }), 2 * time.Hour,
			fakeProber{live: map[string]bool{"0123456789abcdef": true}}, StateHeld, "its liveness lock is held"},
		{"other host, liveness lock free, no heartbeat for long", rec(func(i *Info) { i.Host = "render-box-2" }), 2 * time.Hour,
			fakeProber{live: map[string]bool{"0123456789abcdef": false}}, StateStale, "no heartbeat"},
		{"other host, liveness lock free, fresh heartbeat", rec(func(i *Info) { i.Host = "render-box-2" }), time.Minute,
			fakeProber{live: map[string]bool{"0123456789abcdef": false}}, StateHeld, "render-box-2"},
		// A gone holder's job, its group's start known, keeps the lock
		// however old the heartbeat: the card is in use.
		{"job group with a known start outlives the heartbeat", rec(func(i *Info) { i.ChildPGID, i.ChildStart = 200, 7_000 }), 2 * time.Hour,
			fakeProber{groups: map[int]bool{200: true}}, StateHeld, "(process group 200) is still running"},
		{"job group with a known start, liveness lock free, no heartbeat for long", rec(func(i *Info) { i.ChildPGID, i.ChildStart = 200, 7_000 }), 1000 * time.Hour,
			fakeProber{live: map[string]bool{"0123456789abcdef": false}, groups: map[int]bool{200: true}}, StateHeld, "no heartbeat for 1000h0m0s (stale after 1h30m0s), but its job"},
		{"group noted with its start outlives the heartbeat", rec(nil), 2 * time.Hour,
			fakeProber{live: map[string]bool{"0123456789abcdef": false}, noted: map[string]jobGroup{"0123456789abcdef": {id: 300, since: 7_000}}, groups: map[int]bool{300: true}},
			StateHeld, "process group 300"},
		{"group noted without its start does not", rec(nil), 2 * time.Hour,
			fakeProber{live: map[string]bool{"0123456789abcdef": false}, noted: map[string]jobGroup{"0123456789abcdef": {id: 300}}, groups: map[int]bool{300: true}},
			StateStale, "no heartbeat"},
		{"job group with a known start gone", rec(func(i *Info) { i.ChildPGID, i.ChildStart = 200, 7_000 }), 2 * time.Hour, dead, StateStale, "no heartbeat"},
		{"unparseable, fresh", nil, 2 * time.Second, dead, StateHeld, "being written"},
		{"unparseable, at the grace limit", nil, writeGrace, dead, StateStale, "no valid record"},
		{"unparseable, old", nil, time.Minute, dead, StateStale, "no valid record"},
		{"unparseable, mtime a little in the future", nil, -2 * time.Second, dead, StateHeld, "being written"},
		{"unparseable, mtime far in the future", nil, -time.Hour, dead, StateStale, "no valid record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &Status{Info: tt.info, ModTime: now.Add(-tt.age)}
			judge(st, now, staleAfter, tt.p)
			check(t, st, tt.want, tt.reason)
		})
	}
}

// A shared record whose liveness lock is free and whose named sharer is gone
// is held while any sharer is listed: one whose sidecar's lock is held, or
// one gone whose job's group still runs (see listSharers).
func TestJudgeSharedRecord(t *testing.T) {
	now := time.Date(2026, 10, 12, 20, 18, 0, 0, time.UTC)
	shared := &Info{PID: 100, Token: "0123456789abcdef", Owner: "o", Slug: "s", Share: true}
	free := fakeProber{live: map[string]bool{"0123456789abcdef": false}}
	for _, tt := range []struct {
		name    string
		sharers []Sharer
		age     time.Duration
		want    State
		reason  string
	}{
		{"no sharer left", nil, time.Minute, StateStale, "liveness lock is free"},
		{"a gone sharer's job still runs", []Sharer{{PID: 101, Owner: "reels", Slug: "tts", MiB: 2048, Gone: true}}, time.Minute, StateHeld, "reels/tts (pid 101, gone; its job still runs)"},
		{"the same, no heartbeat for long", []Sharer{{PID: 101, Owner: "reels", Slug: "tts", MiB: 2048, Gone: true}}, 3 * time.Hour, StateHeld, "the jobs of its sharers still run"},
		// A file at a sidecar's name that cannot be opened says nothing
		// of a sharer's life.
		{"only a sidecar that cannot be opened", []Sharer{{MiB: -1, Unopened: true}}, time.Minute, StateStale, "liveness lock is free"},
		{"one that cannot be opened beside a gone sharer's job", []Sharer{{MiB: -1, Unopened: true}, {PID: 101, Owner: "reels", Slug: "tts", MiB: 2048, Gone: true}}, time.Minute, StateHeld, "still run: reels/tts (pid 101, gone; its job still runs)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			info := *shared
			st := &Status{Info: &info, ModTime: now.Add(-tt.age), Sharers: tt.sharers}
			judge(st, now, 90*time.Minute, free)
			check(t, st, tt.want, tt.reason)
		})
	}
}

func check(t *testing.T, st *Status, want State, reason string) {
	t.Helper()
	if st.State != want {
		t.Fatalf("state = %s (%s), want %s", st.State, st.Reason, want)
	}
	if st.Alive != (want == StateHeld) {
		t.Fatalf("alive = %v with state %s", st.Alive, st.State)
	}
	if !strings.Contains(st.Reason, reason) {
		t.Fatalf("reason %q does not contain %q", st.Reason, reason)
	}
}

// A file judged by its mtime alone has outlived its writer once older
// than stale, or more than writeGrace in the future.
func TestOutlived(t *testing.T) {
	const stale = time.Minute
	for _, tt := range []struct {
		age  time.Duration
		want bool
	}{
		{0, false},
		{stale - time.Millisecond, false},
		{stale, true},
		{-writeGrace + time.Millisecond, false},
		{-writeGrace, true},
		{-100 * 365 * 24 * time.Hour, true},
	} {
		if got := outlived(tt.age, stale); got != tt.want {
			t.Errorf("outlived(%s, %s) = %v, want %v", tt.age, stale, got, tt.want)
		}
	}
}
