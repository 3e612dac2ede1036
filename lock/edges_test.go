package lock

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/escape"
	"github.com/gpuexec/gpuexec/internal/osfile"
)

func TestCheckNameAndPrintable(t *testing.T) {
	for _, tt := range []struct {
		name, in  string
		bad       string // substring of checkName's error; "" for none
		printable string
	}{
		{"plain", "channels", "", "channels"},
		{"unicode", "ünï-コード", "", "ünï-コード"},
		{"at the limit", strings.Repeat("a", maxNameLen), "", strings.Repeat("a", maxNameLen)},
		{"too long", strings.Repeat("a", maxNameLen+1), "at most 256", strings.Repeat("a", maxNameLen+1)},
		{"newline", "a\nb", `control character '\n'`, `a\nb`},
		{"escape sequence", "a\x1b[2Jb", `'\x1b'`, `a\x1b[2Jb`},
		{"DEL", "a\x7f", `'\x7f'`, `a\x7f`},
		{"C1 control", "a\u0085", `'\u0085'`, `a\u0085`},
		{"invalid UTF-8", "a\xffb", "not valid UTF-8", `a\xffb`},
		{"bidi override", "a\u202eb", `format character '\u202e'`, `a\u202eb`},
		{"zero-width space", "a\u200bb", `format character '\u200b'`, `a\u200bb`},
		{"line separator", "a\u2028b", `separator '\u2028'`, `a\u2028b`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := checkName(tt.in)
			switch {
			case tt.bad == "" && err != nil:
				t.Errorf("checkName(%q) = %v", tt.in, err)
			case tt.bad != "" && (err == nil || !strings.Contains(err.Error(), tt.bad)):
				t.Errorf("checkName(%q) = %v, want an error with %q", tt.in, err, tt.bad)
			}
			if got := escape.Text(tt.in); got != tt.printable {
				t.Errorf("escape.Text(%q) = %q, want %q", tt.in, got, tt.printable)
			}
			safe := SafeName(tt.in)
			if checkName(safe) != nil || len(safe) > maxNameLen {
				t.Errorf("SafeName(%q) = %q, which checkName refuses", tt.in, safe)
			}
		})
	}
}

// Options refuse names that would garble every status line, and intervals
// that would keep a core busy.
func TestOptionsBounds(t *testing.T) {
	base := Options{Path: "x", Stale: time.Hour}
	for _, tt := range []struct {
		name string
		mod  func(*Options)
	}{
		{"long owner", func(o *Options) { o.Owner = strings.Repeat("o", 70000) }},
		{"newline in slug", func(o *Options) { o.Slug = "a\nb" }},
		{"nanosecond heartbeat", func(o *Options) { o.Heartbeat = time.Nanosecond }},
		{"nanosecond poll", func(o *Options) { o.Poll = time.Nanosecond }},
		{"microsecond report", func(o *Options) { o.Report = time.Microsecond }},
	} {
		o := base
		tt.mod(&o)
		if _, _, err := o.withDefaults(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: withDefaults = %v, want ErrInvalid", tt.name, err)
		}
	}
}

// A liveness file still locked beside a lock whose record is gone is a job
// still running after a forced clear: the lock is held until it ends.
func TestLockedLivenessFileKeepsTheLockHeld(t *testing.T) {
	o := testOptions(t)
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	live, err := takeLive(o.Path, "0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	if err := live.note(jobGroup{id: 4250}); err != nil {
		t.Fatal(err)
	}
	if h, err := TryAcquire(o); h != nil || !errors.Is(err, ErrHeld) {
		t.Fatalf("TryAcquire beside a locked liveness file = %v, %v; want nil, ErrHeld", h, err)
	}
	r, err := Inspect(Options{Path: o.Path})
	if err != nil || len(r.Locks) != 1 {
		t.Fatalf("Inspect = %+v, %v; want one lock", r, err)
	}
	st := r.Locks[0]
	if st.State != StateHeld || !strings.Contains(st.Holder(), "process group 4250") {
		t.Fatalf("Inspect = %+v (%s), %v; want held by the job", st, st.Holder(), err)
	}
	if st.Info != nil || !strings.HasSuffix(st.Orphan, ".live-0123456789abcdef") || st.OrphanGroup != 4250 {
		t.Errorf("Inspect = %+v: want the liveness file that keeps it held, and the group it notes", st)
	}
	for _, force := range []bool{false, true} {
		if _, err := Clear(Options{Path: o.Path}, force); !errors.Is(err, ErrHeld) {
			t.Errorf("Clear(force=%v) = %v, want ErrHeld: nothing may free it but the job's end", force, err)
		}
	}
	// A waiter is woken when the job ends.
	got := make(chan error, 1)
	go func() {
		oo := o
		oo.Poll = time.Hour
		h, err := Acquire(context.Background(), oo)
		if err == nil {
			h.Release()
		}
		got <- err
	}()
	waitUntil(t, "the waiter to queue", func() bool { return liveWaiters(t, o.Path) == 1 })
	live.release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not woken when the liveness file went")
	}
}

// A holder notices within selfCheck that its lock file was removed (a
// forced clear), not at its next heartbeat.
func TestHolderNoticesRemovalAtOnce(t *testing.T) {
	o := testOptions(t) // heartbeat: an hour
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if _, err := Clear(Options{Path: o.Path}, true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Lost():
	case <-time.After(20 * time.Second):
		t.Fatal("the holder did not notice its lock was removed")
	}
}

// Waiters count only the tickets that compete for one of their locks: a
// device's lock competes with itself and with the plain lock beside it,
// which stands for every device; and a ticket that names none with all.
func TestAheadCountsRivalsOnly(t *testing.T) {
	o := testOptions(t)
	dir := filepath.Dir(o.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gpu := func(n string) string { return filepath.Join(dir, "gpu"+n+".lock") }
	take := func(locks ...string) *ticket {
		g, err := takeGuard(context.Background(), o.Path)
		if err != nil {
			t.Fatal(err)
		}
		defer g.release()
		tk, err := takeTicket(g, o, newQueue(o.Path, locks))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tk.drop)
		return tk
	}
	take(gpu("0"))
	take(o.Path)
	take(gpu("0"), gpu("1"))
	// A ticket of an older gpuexec names no locks: it competes with all.
	old := ticketPath(o.Path, 10)
	f, err := osfile.CreateExcl(old, osfile.Locked)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ok, err := osfile.TryLock(f); !ok || err != nil {
		t.Fatal(ok, err)
	}
	f.WriteString(`{"pid":1,"owner":"old","slug":"x"}`)
	for _, tt := range []struct {
		locks []string
		want  int
	}{
		{[]string{gpu("0")}, 4},
		{[]string{gpu("1")}, 3},
		{[]string{gpu("2")}, 2},
		{[]string{o.Path}, 4},
		{[]string{gpu("1"), gpu("2")}, 3},
	} {
		n, err := ahead(newQueue(o.Path, tt.locks), 0, time.Hour)
		if err != nil || n != tt.want {
			t.Errorf("ahead for %v = %d, %v; want %d", tt.locks, n, err, tt.want)
		}
	}
	q, err := readQueue(o.Path, []string{gpu("1")})
	if err != nil || len(q) != 3 || q[0].Locks[0] != "gpu.lock" || q[2].Position != 3 || q[2].Owner != "old" {
		t.Errorf("readQueue for gpu1 = %+v, %v", q, err)
	}
}

// A waiter behind the head passes heads that left a lock free for
// headGrace each.
func TestPassHeads(t *testing.T) {
	dir := t.TempDir()
	free := filepath.Join(dir, "free.lock")
	held := filepath.Join(dir, "held.lock")
	if err := os.WriteFile(held, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for _, tt := range []struct {
		pos   int
		locks []string
		at    time.Duration
		want  bool
	}{
		{2, []string{free}, headGrace - time.Millisecond, false},
		{2, []string{free}, headGrace, true},
		{3, []string{free}, headGrace, false},
		{3, []string{free}, 2 * headGrace, true},
		{2, []string{held}, time.Hour, false},
		{2, []string{held, free}, headGrace, true},
	} {
		ws := &waitState{q: newQueue(filepath.Join(dir, "q.lock"), tt.locks), pos: tt.pos}
		// Free since the folder last changed: at t0.
		if err := os.Chtimes(dir, t0, t0); err != nil {
			t.Fatal(err)
		}
		if ok, _ := ws.passHeads(t0); ok {
			t.Errorf("pos %d %v: passes at the first look", tt.pos, tt.locks)
		}
		got, _ := ws.passHeads(t0.Add(tt.at))
		if got != tt.want || (got && ws.mayPass != tt.pos-1) {
			t.Errorf("pos %d %v after %s: passes %v (pass %d), want %v", tt.pos, tt.locks, tt.at, got, ws.mayPass, tt.want)
		}
	}
	// A lock found free only now has been free since the folder last
	// changed (its removal changed it): its grace counts from then.
	if err := os.Chtimes(dir, t0.Add(-headGrace), t0.Add(-headGrace)); err != nil {
		t.Fatal(err)
	}
	ws := &waitState{q: newQueue(filepath.Join(dir, "q.lock"), []string{free}), pos: 2}
	if ok, _ := ws.passHeads(t0); !ok {
		t.Error("a lock free since the folder changed a grace ago is not passed at the first look")
	}
	// Not free yet: look again a passCheck later; free for less than the
	// grace: look again when it ends.
	ws = &waitState{q: newQueue(filepath.Join(dir, "q.lock"), []string{held}), pos: 2}
	if ok, next := ws.passHeads(t0); ok || next != passCheck {
		t.Errorf("held: passes %v, next look in %s; want no, %s", ok, next, passCheck)
	}
	if err := os.Chtimes(dir, t0, t0); err != nil {
		t.Fatal(err)
	}
	ws = &waitState{q: newQueue(filepath.Join(dir, "q.lock"), []string{free}), pos: 2}
	if ok, next := ws.passHeads(t0.Add(headGrace - 300*time.Millisecond)); ok || next != 300*time.Millisecond {
		t.Errorf("free for a grace less 300ms: passes %v, next look in %s; want no, 300ms", ok, next)
	}
}

// Waiters further back look for a free lock less often, but always at
// least twice within the grace they wait before passing.
func TestPassEvery(t *testing.T) {
	for _, tt := range []struct {
		pos  int
		want time.Duration
	}{
		{0, passCheck}, {1, passCheck}, {2, passCheck}, {3, 2 * passCheck},
		{6, 5 * passCheck}, {11, maxPassCheck}, {100, maxPassCheck},
	} {
		got := passEvery(tt.pos)
		if got != tt.want {
			t.Errorf("passEvery(%d) = %s, want %s", tt.pos, got, tt.want)
		}
		if grace := time.Duration(max(tt.pos-1, 1)) * headGrace; got > grace/2 && got != maxPassCheck {
			t.Errorf("passEvery(%d) = %s: fewer than two looks in its grace of %s", tt.pos, got, grace)
		}
	}
	// A held lock is looked at again a passEvery later.
	dir := t.TempDir()
	held := filepath.Join(dir, "held.lock")
	if err := os.WriteFile(held, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ws := &waitState{q: newQueue(filepath.Join(dir, "q.lock"), []string{held}), pos: 7}
	if ok, next := ws.passHeads(time.Now()); ok || next != 6*passCheck {
		t.Errorf("held, place 7: passes %v, next look in %s; want no, %s", ok, next, 6*passCheck)
	}
}

// Arrival numbers never wrap to the front, whatever the counter in the
// guard or the tickets in the folder say; a guard this process may not
// write still numbers tickets.
func TestArrivalNumbersAreBounded(t *testing.T) {
	o := testOptions(t)
	dir := filepath.Dir(o.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	g, err := takeGuard(context.Background(), o.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.release()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], 1<<64-1)
	if _, err := g.f.WriteAt(b[:], 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(o.Path+ticketSuffix+"18446744073709551615", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	existing, err := listTickets(o.Path)
	if err != nil || len(existing) != 0 {
		t.Fatalf("listTickets = %v, %v; want the out-of-range ticket ignored", existing, err)
	}
	seq, err := g.nextSeq(existing)
	if err != nil || seq != 1 {
		t.Fatalf("nextSeq after a counter at the top = %d, %v; want 1", seq, err)
	}
	ro := &guard{f: g.f, writable: false}
	seq, err = ro.nextSeq([]ticketEntry{{seq: 41}})
	if err != nil || seq != 42 {
		t.Fatalf("nextSeq of a read-only guard = %d, %v; want 42", seq, err)
	}
}

// Whatever counter a member wrote into the guard, the next arrival number
// is above every ticket in the folder and below maxSeq (a ticket at or
// above it is not seen: listTickets); when the tickets themselves reach
// the top, nobody more may queue until they are gone.
func TestArrivalNumbersNearTheTop(t *testing.T) {
	o := testOptions(t)
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	g, err := takeGuard(context.Background(), o.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.release()
	for _, tt := range []struct {
		counter uint64
		last    uint64 // the last ticket's, 0: none
		want    uint64 // 0: refused
	}{
		{0, 0, 1},
		{5, 0, 6},
		{5, 9, 10},
		{counterMax - 1, 0, counterMax},
		{counterMax - 1, counterMax + 5, counterMax + 6},
		{counterMax, 0, 1},
		{maxSeq - 2, 0, 1},
		{maxSeq - 1, 0, 1},
		{maxSeq - 1, 7, 8},
		{maxSeq, 7, 8},
		{1<<64 - 1, 0, 1},
		{maxSeq - 2, maxSeq - 2, maxSeq - 1},
		{3, maxSeq - 1, 0},
	} {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], tt.counter)
		if _, err := g.f.WriteAt(b[:], 0); err != nil {
			t.Fatal(err)
		}
		var existing []ticketEntry
		if tt.last > 0 {
			existing = []ticketEntry{{seq: tt.last}}
		}
		seq, err := g.nextSeq(existing)
		switch {
		case tt.want == 0 && err == nil:
			t.Errorf("counter %d, last ticket %d: nextSeq = %d, want it refused", tt.counter, tt.last, seq)
		case tt.want != 0 && (err != nil || seq != tt.want):
			t.Errorf("counter %d, last ticket %d: nextSeq = %d, %v; want %d", tt.counter, tt.last, seq, err, tt.want)
		}
	}
}

// Suspend stops the process only while it holds no guard, and no guard is
// taken until it is continued.
func TestSuspendWaitsForGuards(t *testing.T) {
	o := testOptions(t)
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	g, err := takeGuard(context.Background(), o.Path)
	if err != nil {
		t.Fatal(err)
	}
	stopped, resume := make(chan struct{}), make(chan struct{})
	go Suspend(func() {
		close(stopped)
		<-resume
	})
	select {
	case <-stopped:
		t.Fatal("stopped while holding a guard")
	case <-time.After(50 * time.Millisecond):
	}
	g.release()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("not stopped once the guard was released")
	}
	taken := make(chan *guard, 1)
	go func() {
		g, err := takeGuard(context.Background(), o.Path)
		if err != nil {
			t.Error(err)
		}
		taken <- g
	}()
	select {
	case <-taken:
		t.Fatal("a guard was taken while suspended")
	case <-time.After(50 * time.Millisecond):
	}
	close(resume)
	select {
	case g := <-taken:
		g.release()
	case <-time.After(10 * time.Second):
		t.Fatal("no guard taken after the process went on")
	}
}
