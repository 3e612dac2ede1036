package top

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gdamore/tcell/v2"
	"github.com/rivo/uniseg"

	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/lock"
)

var now = time.Date(2026, 10, 12, 20, 30, 0, 0, time.UTC)

func iso(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func held(owner, slug string, pid int, since time.Duration, deadline time.Duration) *lock.Status {
	info := &lock.Info{PID: pid, Owner: owner, Slug: slug, AcquiredAt: iso(now.Add(-since))}
	if deadline != 0 {
		info.Deadline = iso(now.Add(deadline))
	}
	return &lock.Status{State: lock.StateHeld, Path: "/tmp/g/gpu.lock", Info: info, Alive: true}
}

func free() *lock.Status { return &lock.Status{State: lock.StateFree, Path: "/tmp/g/gpu.lock"} }

func waiter(pos int, owner, slug string, waited time.Duration) lock.Waiter {
	return lock.Waiter{Position: pos, PID: 100 + pos, Owner: owner, Slug: slug, Since: iso(now.Add(-waited)), Alive: true}
}

func card(used, total gpu.MiB, ps ...gpu.Attributed) gpu.Card {
	return gpu.Card{
		Device:    gpu.Device{Index: 0, UUID: "GPU-0", Name: "NVIDIA GeForce RTX 3080", Memory: gpu.Memory{Total: total, Used: used, Free: total - used, Reserved: 0}},
		Processes: append([]gpu.Attributed{}, ps...),
	}
}

// hostile is an owner string with what a terminal would act on: a
// colour, a cursor move, a screen clear, an OSC title, a newline, a
// bidirectional override and invalid UTF-8.
const hostile = "ev\x1b[31mil\x1b[2J\x1b[H\x1b]0;pwned\x07\nfake line\u202e\xff"

func TestView(t *testing.T) {
	peak := int64(9000)
	started := now.Add(-20 * time.Minute)
	tests := []struct {
		name   string
		s      Snapshot
		want   []string // each in some line
		absent []string // in no line
	}{
		{"free lock", Snapshot{Report: &lock.Report{Locks: []*lock.Status{free()}}},
			[]string{"lock: free", "queue: empty", "GPUs: no nvidia-smi to read them with", "(q quits)"}, []string{"last jobs"}},
		{"held", Snapshot{Report: &lock.Report{Locks: []*lock.Status{held("channels", "ep12", 4242, 3*time.Minute+12*time.Second, 8*time.Minute+55*time.Second)}}},
			[]string{"lock: held by channels/ep12 (pid 4242) for 3m12s, deadline ", "(in 8m55s)"}, nil},
		{"held without deadline", Snapshot{Report: &lock.Report{Locks: []*lock.Status{held("a", "b", 1, 2*time.Hour+5*time.Minute, 0)}}},
			[]string{"held by a/b (pid 1) for 2h05m, no deadline"}, nil},
		{"stale", Snapshot{Report: &lock.Report{Locks: []*lock.Status{{State: lock.StateStale, Info: &lock.Info{PID: 9, Owner: "o", Slug: "s"}, Reason: "holder pid 9 is gone"}}}},
			[]string{"lock: stale: o/s (pid 9); holder pid 9 is gone"}, nil},
		{"queue of 3", Snapshot{Report: &lock.Report{Locks: []*lock.Status{held("a", "b", 1, time.Minute, 0)}, Queue: []lock.Waiter{
			waiter(1, "reels", "tts", 62*time.Second), {Position: 2, Owner: "dead", Slug: "gone"}, waiter(2, "you", "w2", 30*time.Second), waiter(3, "me", "w3", 5*time.Second)}}},
			[]string{"queue (3):", "  1. reels/tts (pid 101) waited 1m02s", "  2. you/w2 (pid 102) waited 30s", "  3. me/w3 (pid 103) waited 5s"}, []string{"dead/gone"}},
		{"devices", Snapshot{Report: &lock.Report{Locks: []*lock.Status{
			func() *lock.Status { s := free(); s.Device = "0"; return s }(),
			func() *lock.Status { s := held("a", "b", 1, time.Minute, 0); s.Device = "1"; return s }()},
			Queue: []lock.Waiter{func() lock.Waiter {
				w := waiter(1, "x", "y", time.Second)
				w.Locks = []string{"gpu0.lock", "gpu1.lock"}
				return w
			}()}}},
			[]string{"GPU 0: free", "GPU 1: held by a/b (pid 1)", "waited 1s for gpu0.lock,gpu1.lock"}, nil},
		{"cards attributed and foreign", Snapshot{Report: &lock.Report{Locks: []*lock.Status{free()}}, Cards: []gpu.Card{card(5120, 10240,
			gpu.Attributed{Process: gpu.Process{PID: 4711, Name: "python", Used: 4096}, Job: &gpu.Job{Owner: "channels", Slug: "ep12", PID: 4242}},
			gpu.Attributed{Process: gpu.Process{PID: 99, Name: "Xorg", Used: 1024}})}},
			[]string{"GPU 0 NVIDIA GeForce RTX 3080", "  [" + strings.Repeat("#", 19) + strings.Repeat(".", 19) + "] 5.0 GiB of 10.0 GiB used",
				"pid 4711 python (4.0 GiB) under gpuexec channels/ep12 (pid 4242)", "pid 99 Xorg (1.0 GiB) not under gpuexec"}, nil},
		{"card without processes, processes unknown", Snapshot{Report: &lock.Report{Locks: []*lock.Status{free()}},
			Cards: []gpu.Card{card(0, 10240), {Device: gpu.Device{Index: 1, Name: "B", Memory: gpu.Memory{Total: gpu.Unknown, Used: gpu.Unknown}}}}, CardsErr: "processes unknown: nvidia-smi failed"},
			[]string{"[......", "  no process", "GPU 1 B", "memory: unknown of unknown used", "processes: unknown", "GPU processes unknown: nvidia-smi failed"}, nil},
		{"held beside a free lock", Snapshot{Report: &lock.Report{Locks: []*lock.Status{free()},
			Beside: []*lock.Status{func() *lock.Status {
				s := held("a", "b", 1, time.Minute, 0)
				s.Path, s.Device = "/tmp/g/gpu1.lock", "1"
				return s
			}(),
				func() *lock.Status { s := free(); s.Path, s.Device = "/tmp/g/gpu0.lock", "0"; return s }()}}},
			[]string{"lock: free", "beside, gpu1.lock: held by a/b (pid 1) for 1m00s"}, []string{"gpu0.lock"}},
		{"shared", Snapshot{Report: &lock.Report{Locks: []*lock.Status{func() *lock.Status {
			s := held(hostile, "x", 1, time.Minute, 0)
			s.Info.Share = true
			s.Sharers = []lock.Sharer{{PID: 1, Owner: hostile, Slug: "x", MiB: 4096, UsedMiB: 5000, Over: true}, {Unopened: true, MiB: -1}}
			return s
		}()}}},
			[]string{"  sharer ev\\x1b[31m", ": budget 4.0 GiB, using 4.9 GiB: OVER BU…", "  sharer: a sidecar this user may not read"}, nil},
		{"cover, stopped", Snapshot{Report: &lock.Report{Locks: []*lock.Status{func() *lock.Status {
			s := held("a", "b", 1, time.Minute, 0)
			s.Info.Cover, s.JobProcess = true, lock.ProcStopped
			return s
		}()}}},
			[]string{"lock: held for the GPU locks beside it, named by a/b (pid 1) for 1m00s, no deadline, STOPPED"}, nil},
		{"GPUs read a while ago", Snapshot{Report: &lock.Report{Locks: []*lock.Status{free()}}, Cards: []gpu.Card{card(0, 1)}, CardsAt: now.Add(-7 * time.Second)},
			[]string{"(GPUs read 7s ago)"}, nil},
		{"GPUs read now", Snapshot{Report: &lock.Report{Locks: []*lock.Status{free()}}, Cards: []gpu.Card{card(0, 1)}, CardsAt: now},
			nil, []string{"GPUs read"}},
		{"no GPU", Snapshot{Report: &lock.Report{Locks: []*lock.Status{free()}}, Cards: []gpu.Card{}}, []string{"GPUs: none"}, nil},
		{"lock unreadable", Snapshot{LockErr: "cannot read the lock"}, []string{"lock: unreadable (cannot read the lock)"}, nil},
		{"journal", Snapshot{Report: &lock.Report{Locks: []*lock.Status{free()}}, Jobs: []journal.Record{
			{Owner: "channels", Slug: "ep11", Outcome: journal.OK, Started: &started, Ended: now, WaitedMS: 4000, HeldMS: 723000, PeakMiB: &peak},
			{Owner: "reels", Slug: "tts", Outcome: journal.Failed, Status: 3, Started: &started, Ended: now, HeldMS: 1000},
			{Owner: "x", Slug: "late", Outcome: journal.Deferred, Ended: now, WaitedMS: 9000000}}},
			[]string{"last jobs:", "ok          channels/ep11 waited 4s held 12m03s peak 8.8 GiB", "failed 3    reels/tts waited 0s held 1s", "deferred    x/late waited 2h30m"},
			[]string{"late waited 2h30m held"}},
		{"missing journal", Snapshot{Report: &lock.Report{Locks: []*lock.Status{free()}}, JournalNote: "no journal yet at /tmp/g/gpu.lock.journal"},
			[]string{"last jobs:", "  no journal yet at /tmp/g/gpu.lock.journal"}, nil},
		{"hostile strings", Snapshot{Path: "/tmp/\x1b[2J", Report: &lock.Report{Locks: []*lock.Status{held(hostile, hostile, 1, time.Minute, 0)},
			Queue: []lock.Waiter{waiter(1, hostile, hostile, time.Second)}},
			Cards:    []gpu.Card{card(1, 2, gpu.Attributed{Process: gpu.Process{PID: 5, Name: hostile, Used: 1}, Job: &gpu.Job{Owner: hostile, Slug: hostile}})},
			CardsErr: hostile, LockErr: hostile, JournalNote: hostile,
			Jobs: []journal.Record{{Owner: hostile, Slug: hostile, Outcome: journal.OK, Ended: now}}},
			[]string{`ev\x1b[31mil\x1b[2J\x1b[H\x1b]0;pwned\a\nfake line\u202e\xff/`, `/tmp/\x1b[2J`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.s.At = now
			got := View(tt.s, 120, 100)
			text := strings.Join(got, "\n")
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("no %q in\n%s", w, text)
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(text, a) {
					t.Errorf("%q in\n%s", a, text)
				}
			}
			wantShowable(t, got, 120, 100)
		})
	}
}

// wantShowable fails unless lines fit width by height and hold nothing a
// terminal acts on: valid UTF-8 of printable runes only.
func wantShowable(t *testing.T, lines []string, width, height int) {
	t.Helper()
	if len(lines) > max(height, 0) {
		t.Errorf("%d lines for a height of %d", len(lines), height)
	}
	for _, l := range lines {
		if w := uniseg.StringWidth(l); w > width {
			t.Errorf("%d columns for a width of %d: %q", w, width, l)
		}
		if !utf8.ValidString(l) {
			t.Errorf("invalid UTF-8: %q", l)
		}
		for _, r := range l {
			if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u202e' {
				t.Errorf("a rune a terminal acts on (%U): %q", r, l)
			}
		}
	}
}

// Every size cuts, never wraps nor panics: 0x0, 20x5, one column, one
// row, a size larger than the frame.
func TestViewSizes(t *testing.T) {
	s := Snapshot{At: now, Path: "/tmp/gpuexec/gpu.lock", Report: &lock.Report{Locks: []*lock.Status{held("channels", "ep12 with a long slug 日本語の名前", 4242, time.Minute, time.Hour)},
		Queue: []lock.Waiter{waiter(1, "a", "b", time.Second), waiter(2, "c", "d", time.Second), waiter(3, "e", "f", time.Second)}},
		Cards: []gpu.Card{card(5000, 10000, gpu.Attributed{Process: gpu.Process{PID: 1, Name: "日本語", Used: 100}})}}
	for _, size := range [][2]int{{0, 0}, {-1, -1}, {0, 10}, {10, 0}, {1, 1}, {2, 1}, {20, 5}, {1, 40}, {200, 1}, {200, 200}, {5, 3}} {
		got := View(s, size[0], size[1])
		wantShowable(t, got, size[0], size[1])
		if size[0] > 0 && size[1] > 0 && len(got) == 0 {
			t.Errorf("%dx%d: nothing shown", size[0], size[1])
		}
	}
	if got := View(s, 20, 5); !strings.HasPrefix(got[4], "… ") {
		t.Errorf("20x5: the last line does not say lines were left out: %q", got)
	}
}

func TestBarAndDuration(t *testing.T) {
	bars := []struct {
		used, total int64
		n           int
		want        string
	}{
		{0, 10, 12, "[..........]"}, {5, 10, 12, "[#####.....]"}, {10, 10, 12, "[##########]"}, {20, 10, 12, "[##########]"},
		{1, 100000, 7, "[#....]"}, {5, 10, 2, ""}, {5, 10, -4, ""}, {5, 0, 5, "[...]"},
	}
	for _, b := range bars {
		if got := Bar(b.used, b.total, b.n); got != b.want {
			t.Errorf("Bar(%d, %d, %d) = %q, want %q", b.used, b.total, b.n, got, b.want)
		}
	}
	durs := map[time.Duration]string{-time.Second: "0s", 0: "0s", 59 * time.Second: "59s", 61 * time.Second: "1m01s",
		2*time.Hour + 5*time.Minute: "2h05m", 76 * time.Hour: "3d04h"}
	for d, want := range durs {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%s) = %q, want %q", d, got, want)
		}
	}
}

// Run draws the snapshot, redraws new ones, and each quit key ends it.
func TestRunQuitKeys(t *testing.T) {
	keys := []struct {
		name string
		key  tcell.Key
		r    rune
	}{{"q", tcell.KeyRune, 'q'}, {"Q", tcell.KeyRune, 'Q'}, {"Esc", tcell.KeyEscape, 0}, {"Ctrl+C", tcell.KeyCtrlC, 0}}
	for _, k := range keys {
		t.Run(k.name, func(t *testing.T) {
			screen := tcell.NewSimulationScreen("UTF-8")
			if err := screen.Init(); err != nil {
				t.Fatal(err)
			}
			defer screen.Fini()
			screen.SetSize(60, 10)
			calls := make(chan int, 100)
			n := 0
			snap := func() Snapshot {
				n++
				calls <- n
				return Snapshot{At: now, Report: &lock.Report{Locks: []*lock.Status{held("me", "job"+string(rune('0'+n%10)), 1, time.Second, 0)}}}
			}
			done := make(chan error, 1)
			go func() { done <- Run(context.Background(), screen, snap, 100*time.Millisecond) }()
			// Two snapshots drawn: the first, and a redraw.
			deadline := time.After(10 * time.Second)
			for seen := 0; seen < 2; {
				select {
				case <-calls:
					seen++
				case <-deadline:
					t.Fatal("Run read no second snapshot")
				}
			}
			screen.InjectKey(tcell.KeyRune, 'x', tcell.ModNone) // not a quit key
			screen.InjectKey(k.key, k.r, tcell.ModNone)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s did not quit", k.name)
			}
			if text := screenText(screen); !strings.Contains(text, "held by me/job") {
				t.Errorf("the screen shows\n%s", text)
			}
		})
	}
}

func screenText(s tcell.SimulationScreen) string {
	cells, w, _ := s.GetContents()
	var b strings.Builder
	for i, c := range cells {
		if i > 0 && i%w == 0 {
			b.WriteByte('\n')
		}
		if len(c.Runes) > 0 {
			b.WriteString(string(c.Runes))
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// The end of ctx ends Run.
func TestRunEndsWithContext(t *testing.T) {
	screen := tcell.NewSimulationScreen("UTF-8")
	if err := screen.Init(); err != nil {
		t.Fatal(err)
	}
	defer screen.Fini()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Run(ctx, screen, func() Snapshot { return Snapshot{} }, 0); err != nil {
		t.Fatal(err)
	}
}
