package lock

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testlog"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

func TestFmtSpan(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Hour, "0s"},
		{0, "0s"},
		{400 * time.Millisecond, "0s"},
		{42 * time.Second, "42s"},
		{59 * time.Second, "59s"},
		{59*time.Second + 600*time.Millisecond, "1m"},
		{12*time.Minute + 29*time.Second, "12m"},
		{12*time.Minute + 30*time.Second, "13m"},
		{time.Hour, "1h"},
		{2*time.Hour + 25*time.Minute, "2h25m"},
		{26 * time.Hour, "26h"},
	} {
		if got := fmtSpan(tc.d); got != tc.want {
			t.Errorf("fmtSpan(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestWaitingLine(t *testing.T) {
	now := time.Date(2026, 10, 12, 21, 12, 0, 0, time.Local)
	iso := func(d time.Duration) string { return now.Add(d).UTC().Format(isoMillis) }
	clock := func(d time.Duration) string { return now.Add(d).Format("15:04") }
	held := func(owner string, pid int, since time.Duration, deadline string) *Status {
		return &Status{State: StateHeld, Path: "/l/gpu.lock", Alive: true, Info: &Info{
			PID: pid, Owner: owner, Slug: "ep12", Token: "0123456789abcdef", AcquiredAt: iso(-since), Deadline: deadline,
		}}
	}
	dev := func(name string, st *Status) *Status { st.Device, st.Path = name, "/l/gpu"+name+".lock"; return st }
	waited := Waiting{Position: 2, Of: 3, Waited: 5 * time.Minute, Until: now.Add(2*time.Hour + 25*time.Minute)}
	for _, tc := range []struct {
		name string
		seen []*Status
		w    Waiting
		want string
	}{
		{
			"holder with a deadline",
			[]*Status{held("channels", 4242, 12*time.Minute, iso(28*time.Minute))}, waited,
			"waiting for GPU lock: held by channels/ep12 (pid 4242) for 12m, deadline " + clock(28*time.Minute) + " (in 28m); position 2 of 3; waited 5m, defers in 2h25m",
		},
		{
			"no deadline, no wait limit, first in the queue",
			[]*Status{held("reels", 7, 30*time.Second, "")}, Waiting{Position: 1, Of: 1, Waited: 3 * time.Second},
			"waiting for GPU lock: held by reels/ep12 (pid 7) for 30s; position 1 of 1; waited 3s",
		},
		{
			"deadline passed: the job is being stopped",
			[]*Status{held("reels", 7, time.Hour, iso(-3*time.Minute))}, Waiting{Position: 1, Waited: time.Minute},
			"waiting for GPU lock: held by reels/ep12 (pid 7) for 1h, deadline " + clock(-3*time.Minute) + " (3m ago); position 1 of 1; waited 1m",
		},
		{
			"deadline on another day",
			[]*Status{held("reels", 7, time.Hour, iso(5*time.Hour))}, Waiting{Waited: time.Minute},
			"waiting for GPU lock: held by reels/ep12 (pid 7) for 1h, deadline " + now.Add(5*time.Hour).Format("Jan 2 15:04") + " (in 5h); waited 1m",
		},
		{
			"a record being written: no times, the reason",
			[]*Status{{State: StateHeld, Path: "/l/gpu.lock", Reason: "record being written"}}, Waiting{Position: 1, Waited: 0},
			"waiting for GPU lock: held by an unreadable lock record (record being written); position 1 of 1; waited 0s",
		},
		{
			"free, earlier arrivals first",
			[]*Status{{State: StateFree, Path: "/l/gpu.lock"}}, waited,
			"waiting for GPU lock: free, but earlier arrivals go first; position 2 of 3; waited 5m, defers in 2h25m",
		},
		{
			"devices",
			[]*Status{dev("0", held("channels", 4242, 12*time.Minute, iso(28*time.Minute))), dev("1", &Status{State: StateFree})},
			Waiting{Position: 1, Of: 2, Waited: time.Minute},
			"waiting for GPU locks: GPU 0: held by channels/ep12 (pid 4242) for 12m, deadline " + clock(28*time.Minute) + " (in 28m); GPU 1: free; position 1 of 2; waited 1m",
		},
		{
			"another user's owner and slug, made printable",
			[]*Status{{State: StateHeld, Path: "/l/gpu.lock", Alive: true, Info: &Info{PID: 9, Owner: "ev\nil\x1b[2J", Slug: "a\u202eb", Token: "0123456789abcdef"}}},
			Waiting{Waited: time.Second},
			`waiting for GPU lock: held by ev\nil\x1b[2J/a\u202eb (pid 9); waited 1s`,
		},
		{
			"fewer counted than the position",
			[]*Status{{State: StateFree}}, Waiting{Position: 3, Of: 1, Waited: time.Second},
			"waiting for GPU lock: free, but earlier arrivals go first; position 3 of 3; waited 1s",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if line := waitingLine(tc.seen, tc.w, now); line != tc.want {
				t.Errorf("line\n got %q\nwant %q", line, tc.want)
			}
		})
	}
}

func TestAdmitLine(t *testing.T) {
	now := time.Now()
	why := "10.0 GiB on GPU 0: 3.1 GiB free; pid 4711 python (17.2 GiB) not under gpuexec"
	line := admitLine(why, Waiting{Position: 1, Of: 2, Waited: 5 * time.Minute, Until: now.Add(2*time.Hour + 25*time.Minute)}, now)
	if want := "waiting for " + why + "; position 1 of 2; waited 5m, defers in 2h25m"; line != want {
		t.Errorf("line\n got %q\nwant %q", line, want)
	}
}

// The deadline is an extra field of the record: one that is not a time is
// no deadline, and the record is read all the same.
func TestRecordDeadline(t *testing.T) {
	const base = `{"pid":7,"acquiredAt":"2026-10-12T12:18:03.512Z","owner":"a","slug":"b","token":"0123456789abcdef"`
	for _, tc := range []struct{ extra, want string }{
		{``, ``},
		{`,"deadline":"2026-10-12T13:18:03.512Z"`, `2026-10-12T13:18:03.512Z`},
		{`,"deadline":"2026-10-12T15:18:03+02:00"`, `2026-10-12T15:18:03+02:00`},
		{`,"deadline":null`, ``},
		{`,"deadline":1760275083512`, ``},
		{`,"deadline":"in an hour"`, ``},
		{`,"deadline":{"at":"2026-10-12T13:18:03.512Z"}`, ``},
		{`,"deadline":"` + strings.Repeat("9", 100) + `"`, ``},
		{`,"deadline":"2026-10-12T13:18:03.512Z\u001b[2J"`, ``},
	} {
		info, err := parseRecord([]byte(base + tc.extra + "}"))
		if err != nil {
			t.Errorf("%s: %v", tc.extra, err)
			continue
		}
		if info.Deadline != tc.want {
			t.Errorf("%s: deadline %q, want %q", tc.extra, info.Deadline, tc.want)
		}
		if got := info.DeadlineTime(); got.IsZero() != (tc.want == "") {
			t.Errorf("%s: DeadlineTime %v", tc.extra, got)
		}
	}
}

// A holder with a HoldLimit records its deadline; one without records none.
func TestHoldLimitDeadline(t *testing.T) {
	for _, limit := range []time.Duration{0, 90 * time.Minute} {
		o := testOptions(t)
		o.HoldLimit = limit
		h, err := Acquire(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		info := h.Info()
		st, err := readStatus(o.Path)
		h.Release()
		if err != nil || st.Info == nil {
			t.Fatalf("reading the record: %v", err)
		}
		switch {
		case limit == 0 && (info.Deadline != "" || st.Info.Deadline != ""):
			t.Errorf("no HoldLimit, deadline %q in the record", st.Info.Deadline)
		case limit > 0 && st.Info.DeadlineTime().Sub(st.Info.Acquired()) != limit:
			t.Errorf("HoldLimit %s: acquired %s, deadline %q", limit, st.Info.AcquiredAt, st.Info.Deadline)
		}
	}
}

// waitingLines are the waiting lines logged so far.
func waitingLines(logs *testlog.Buffer) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "waiting for GPU lock") {
			out = append(out, l)
		}
	}
	return out
}

// A waiter reports on its own schedule: with a poll of an hour and a
// report every few milliseconds, lines keep coming while nothing wakes it
// for a try. Each names the holder, how long it has held the lock and its
// deadline, the position, the wait so far and the time left, in its
// message alone.
func TestReportOnItsOwnSchedule(t *testing.T) {
	o := testOptions(t)
	ho := o
	ho.Owner, ho.Slug, ho.HoldLimit = "channels", "ep12", time.Hour
	h, err := Acquire(context.Background(), ho)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()

	var logs testlog.Buffer
	wo := o
	wo.Poll, wo.Report, wo.Logger = time.Hour, 20*time.Millisecond, testlog.Logger(&logs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Acquire(ctx, wo)
		done <- err
	}()
	testsupport.Await(t, 20*time.Second, "four waiting lines", func() bool { return len(waitingLines(&logs)) >= 4 })
	cancel()
	<-done
	want := fmt.Sprintf("waiting for GPU lock: held by channels/ep12 (pid %d) for ", h.Info().PID)
	for _, l := range waitingLines(&logs) {
		for _, part := range []string{want, ", deadline ", " (in 1h)", "; position 1 of 1; waited ", ", defers in 1h: path="} {
			if !strings.Contains(l, part) {
				t.Errorf("waiting line lacks %q:\n%s", part, l)
			}
		}
		// The message says it all: no field repeats it.
		for _, field := range []string{"holder=", "held-for=", "deadline=", "position=", "queue-length=", "waited=", "defers-in="} {
			if strings.Contains(l, field) {
				t.Errorf("waiting line repeats its message as a field (%s):\n%s", field, l)
			}
		}
	}
}

// A waiter's line counts the live waiters ahead of it and behind it as
// they are when the line is due, even when nothing woke it since: a
// waiter behind the head is not woken when a waiter ahead of it leaves.
func TestReportPositionOfN(t *testing.T) {
	o := testOptions(t)
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()

	type waiter struct {
		logs   testlog.Buffer
		cancel context.CancelFunc
		done   chan error
	}
	ws := make([]*waiter, 3)
	for i := range ws {
		w := &waiter{done: make(chan error, 1)}
		ws[i] = w
		wo := o
		wo.Slug = fmt.Sprintf("w%d", i+1)
		wo.Poll, wo.Report, wo.Logger = time.Hour, 20*time.Millisecond, testlog.Logger(&w.logs)
		var ctx context.Context
		ctx, w.cancel = context.WithCancel(context.Background())
		go func() {
			h, err := Acquire(ctx, wo)
			if err == nil {
				// The holder let go as the test ended.
				h.Release()
			}
			w.done <- err
		}()
		// Gone before the folder is removed (Windows removes no open
		// ticket).
		t.Cleanup(func() {
			w.cancel()
			<-w.done
		})
		// In arrival order: the next starts once this one is queued.
		testsupport.Await(t, 20*time.Second, wo.Slug+" to queue", func() bool { return len(waitingLines(&w.logs)) > 0 })
	}
	lastHas := func(w *waiter, s string) func() bool {
		return func() bool {
			l := waitingLines(&w.logs)
			return strings.Contains(l[len(l)-1], s)
		}
	}
	testsupport.Await(t, 20*time.Second, "w2 at 2 of 3", lastHas(ws[1], "; position 2 of 3;"))
	testsupport.Await(t, 20*time.Second, "w3 at 3 of 3", lastHas(ws[2], "; position 3 of 3;"))
	ws[0].cancel()
	<-ws[0].done
	ws[0].done <- nil // for the cleanup
	testsupport.Await(t, 20*time.Second, "w2 at 1 of 2", lastHas(ws[1], "; position 1 of 2;"))
	testsupport.Await(t, 20*time.Second, "w3 at 2 of 2", lastHas(ws[2], "; position 2 of 2;"))
}
