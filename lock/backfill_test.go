package lock

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestAheadHeadStart(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return now.Add(d).Format(isoMillis) }
	sh := func(mib int64, deadline string) Sharer { return Sharer{MiB: mib, Deadline: deadline} }
	for _, tc := range []struct {
		name    string
		head    Ahead
		room    int64
		sharers []Sharer
		want    time.Duration // from now
		ok      bool
	}{
		{"fits now", Ahead{MiB: 2048}, 4096, []Sharer{sh(9216, at(time.Minute))}, 0, true},
		{"one sharer's end frees enough", Ahead{MiB: 9216}, 4096, []Sharer{sh(9216, at(time.Minute))}, time.Minute, true},
		{"the earliest ends first", Ahead{MiB: 6144}, 2048,
			[]Sharer{sh(9216, at(3*time.Minute)), sh(2048, at(time.Minute)), sh(2048, at(2*time.Minute))}, 2 * time.Minute, true},
		{"a sharer needed has no deadline", Ahead{MiB: 9216}, 1024,
			[]Sharer{sh(2048, at(time.Minute)), sh(9216, "")}, 0, false},
		{"one without a deadline is not needed", Ahead{MiB: 3072}, 1024,
			[]Sharer{sh(9216, ""), sh(2048, at(time.Minute))}, time.Minute, true},
		{"more than the sharers will free", Ahead{MiB: 20480}, 1024, []Sharer{sh(9216, at(time.Minute))}, 0, false},
		{"a budget that cannot be read", Ahead{MiB: 9216}, 1024, []Sharer{sh(-1, at(time.Second))}, 0, false},
		{"a gone sharer: nothing stops its job", Ahead{MiB: 9216}, 1024,
			[]Sharer{{MiB: 9216, Deadline: at(time.Second), Gone: true}}, 0, false},
		{"a file that cannot be opened", Ahead{MiB: 9216}, 1024,
			[]Sharer{{MiB: 9216, Deadline: at(time.Second), Unopened: true}}, 0, false},
		{"a deadline that is no time", Ahead{MiB: 9216}, 1024, []Sharer{sh(9216, "soon")}, 0, false},
		{"whole card: the last deadline", Ahead{Whole: true}, 0,
			[]Sharer{sh(2048, at(time.Minute)), sh(2048, at(3*time.Minute)), sh(2048, at(2*time.Minute))}, 3 * time.Minute, true},
		{"whole card: one without a deadline", Ahead{Whole: true}, 0,
			[]Sharer{sh(2048, at(time.Minute)), sh(2048, "")}, 0, false},
		{"whole card, nobody on it", Ahead{Whole: true}, 0, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.head.HeadStart(now, tc.room, tc.sharers)
			if ok != tc.ok || ok && !got.Equal(now.Add(tc.want)) {
				t.Fatalf("HeadStart = %v, %v; want %v, %v", got, ok, now.Add(tc.want), tc.ok)
			}
		})
	}
}

func TestAheadPasses(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	sharers := []Sharer{{MiB: 12288, Deadline: now.Add(time.Minute).Format(isoMillis)}}
	for _, tc := range []struct {
		ends time.Duration
		want bool
	}{{30 * time.Second, true}, {time.Minute, true}, {time.Minute + time.Millisecond, false}} {
		a := Ahead{MiB: 12288, Ends: now.Add(tc.ends)}
		if got := a.Passes(now, 10240, sharers); got != tc.want {
			t.Errorf("ending %s after now, before a head that can start in a minute: Passes = %v", tc.ends, got)
		}
	}
}

// ticketAt writes rec as the ticket seq of the lock at lockPath; with held,
// it also takes the ticket's kernel lock until t ends, as a live waiter
// does (a ticket whose lock is free is a gone waiter's).
func ticketAt(t *testing.T, lockPath string, seq uint64, rec ticketRecord, held bool) {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	p := ticketPath(lockPath, seq)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if !held {
		return
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := lockNew(f, "ticket"); err != nil {
		t.Fatal(err)
	}
}

// backfillAhead reads the waiters ahead from their tickets: the head's
// need, how many are passed, and none past a waiter whose need cannot be
// told.
func TestBackfillAhead(t *testing.T) {
	dir := t.TempDir()
	lockPath := filepath.Join(dir, "gpu.lock")
	o := Options{Path: lockPath, HoldLimit: 10 * time.Second}
	q := newQueue(lockPath, []string{lockPath})
	ticketAt(t, lockPath, 1, ticketRecord{PID: 1, Owner: "reels", Slug: "render", Locks: []string{"gpu.lock"}, Share: true, VRAMMiB: 9216}, true)
	ticketAt(t, lockPath, 2, ticketRecord{PID: 2, Owner: "img", Slug: "x", Locks: []string{"gpu.lock"}, Whole: true}, true)
	ticketAt(t, lockPath, 3, ticketRecord{PID: 3, Owner: "dead", Slug: "y", Locks: []string{"gpu.lock"}, Whole: true}, false) // gone
	before := time.Now()
	a, ok := backfillAhead(q, 4, o, minJoinSlack)
	if !ok || a.Owner != "reels" || a.Slug != "render" || a.Whole || a.MiB != 9216 || a.Waiters != 2 {
		t.Fatalf("backfillAhead = %+v, %v", a, ok)
	}
	if min := before.Add(o.HoldLimit + releaseMargin + minJoinSlack); a.Ends.Before(min) {
		t.Errorf("Ends %v, before %v", a.Ends, min)
	}
	if _, ok := backfillAhead(q, 1, o, minJoinSlack); ok {
		t.Error("the head itself has nobody to pass")
	}
	// A ticket that says neither share nor whole (an older gpuexec's):
	// its need is unknown.
	old := filepath.Join(dir, "old.lock")
	ticketAt(t, old, 1, ticketRecord{PID: 1, Owner: "old", Slug: "s", Locks: []string{"old.lock"}}, true)
	if _, ok := backfillAhead(newQueue(old, []string{old}), 2, o, minJoinSlack); ok {
		t.Error("passed a waiter whose ticket says nothing of its need")
	}
	// A waiter for a device set ahead: its start cannot be worked out.
	ticketAt(t, lockPath, 5, ticketRecord{PID: 5, Owner: "set", Slug: "z", Locks: []string{"gpu0.lock", "gpu1.lock"}, Whole: true}, true)
	if _, ok := backfillAhead(q, 6, o, minJoinSlack); ok {
		t.Error("passed a device set's waiter")
	}
	// A sharer's ticket without a budget.
	noBudget := filepath.Join(dir, "b.lock")
	ticketAt(t, noBudget, 1, ticketRecord{PID: 1, Owner: "o", Slug: "s", Locks: []string{"b.lock"}, Share: true}, true)
	if _, ok := backfillAhead(newQueue(noBudget, []string{noBudget}), 2, o, minJoinSlack); ok {
		t.Error("passed a sharer whose ticket names no budget")
	}
	// More than maxBackfillPass waiters ahead.
	many := filepath.Join(dir, "c.lock")
	for i := uint64(1); i <= maxBackfillPass+1; i++ {
		ticketAt(t, many, i, ticketRecord{PID: int(i), Owner: "o", Slug: "s", Locks: []string{"c.lock"}, Whole: true}, true)
	}
	q3 := newQueue(many, []string{many})
	if _, ok := backfillAhead(q3, maxBackfillPass+2, o, minJoinSlack); ok {
		t.Errorf("passed more than %d waiters", maxBackfillPass)
	}
	if _, ok := backfillAhead(q3, maxBackfillPass+1, o, minJoinSlack); !ok {
		t.Errorf("did not pass %d waiters", maxBackfillPass)
	}
}

// A sidecar's deadline is another member's word: one that is no time is
// none.
func TestParseSharerDeadline(t *testing.T) {
	for in, want := range map[string]string{
		`{"vramMiB":1,"deadline":"2026-12-03T12:00:00.000Z"}`: "2026-12-03T12:00:00.000Z",
		`{"vramMiB":1,"deadline":"tomorrow"}`:                 "",
		`{"vramMiB":1,"deadline":7}`:                          "",
	} {
		s, _ := parseSharer([]byte(in))
		if s.Deadline != want {
			t.Errorf("%s: Deadline %q, want %q", in, s.Deadline, want)
		}
	}
}
