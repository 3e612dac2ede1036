// Package top is `gpuexec top`'s live view of a lock: who holds it (or
// each device's), the queue, each card's video memory and the processes on
// it attributed to their jobs, and the last jobs of the journal.
//
// The view is a pure function of a Snapshot (View, Lines): the caller reads
// the lock, the cards and the journal, and this package only lays out what
// it is given, so that what a terminal shows is tested without one. Run
// draws those lines on a tcell screen and redraws them as snapshots come.
//
// Every string that another user wrote (a lock record's or ticket's owner
// and slug, a journal line's, a process name) is shown escaped (package
// escape): nothing a snapshot holds can move the cursor, change colours or
// forge a line.
package top

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/rivo/uniseg"

	"github.com/gpuexec/gpuexec/internal/escape"
	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/internal/report"
	"github.com/gpuexec/gpuexec/lock"
)

// Snapshot is what one frame shows, read at At.
type Snapshot struct {
	// At is when the snapshot was read: durations (held for, waited)
	// are counted up to it.
	At time.Time
	// Path names the lock read (a path or an etcd URL), for the header.
	Path string
	// Report is the lock as lock.Backend.Inspect read it; nil when it
	// could not be read, and LockErr says why.
	Report  *lock.Report
	LockErr string
	// Cards are the cards with their processes attributed (as status
	// reads them); nil when there is no nvidia-smi to read them with.
	// CardsErr says why the cards, or only their processes (Processes
	// nil), are unknown.
	Cards    []gpu.Card
	CardsErr string
	// CardsAt is when the cards were read (they are read less often
	// than the lock); zero when they were read at At.
	CardsAt time.Time
	// Jobs are the last jobs of the journal, oldest first.
	Jobs []journal.Record
	// JournalNote is one line about the journal when it says something
	// beside its jobs: none yet, lines set aside, unreadable.
	JournalNote string
}

// View is s laid out for a terminal of width columns and height rows:
// Lines cut to fit, each line at most width columns (never wrapped), and
// at most height lines, the last of which says how many were left out.
// A size of 0 or less gives no line.
func View(s Snapshot, width, height int) []string {
	if width <= 0 || height <= 0 {
		return nil
	}
	lines := Lines(s, width)
	lines[0] = "gpuexec top (q quits)" + strings.TrimPrefix(lines[0], "gpuexec top")
	if len(lines) > height {
		more := len(lines) - height + 1
		lines = append(lines[:height-1:height-1], fmt.Sprintf("… %d more line(s): a taller terminal shows them", more))
	}
	for i, l := range lines {
		lines[i] = Cut(l, width)
	}
	return lines
}

// Lines is s as lines of text, not cut: the memory bars sized for width
// columns. It is what `gpuexec top` prints when its output is not a
// terminal.
func Lines(s Snapshot, width int) []string {
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	header := "gpuexec top"
	if !s.At.IsZero() {
		header += "  " + s.At.Local().Format("15:04:05")
	}
	if s.Path != "" {
		header += "  " + escape.Text(s.Path)
	}
	add("%s", header)

	// The lock, or each device's.
	switch r := s.Report; {
	case r == nil:
		add("lock: unreadable (%s)", escape.Text(s.LockErr))
	default:
		devices := len(r.Locks) != 1 || r.Locks[0].Device != ""
		for _, st := range r.Locks {
			prefix := "lock: "
			if devices {
				prefix = "GPU " + escape.Text(st.Device) + ": "
			}
			out = append(out, lockLines(prefix, st, s.At)...)
		}
		for _, st := range r.Beside {
			if st.State == lock.StateHeld {
				out = append(out, lockLines("beside, "+escape.Text(filepath.Base(st.Path))+": ", st, s.At)...)
			}
		}
		out = append(out, queueLines(r.Queue, s.At, devices)...)
	}

	// The cards.
	switch {
	case s.Cards == nil && s.CardsErr != "":
		add("GPUs: unknown (%s)", escape.Text(s.CardsErr))
	case s.Cards == nil:
		add("GPUs: no nvidia-smi to read them with")
	case len(s.Cards) == 0:
		add("GPUs: none (nvidia-smi found no GPU)")
	default:
		for _, c := range s.Cards {
			out = append(out, cardLines(c, width)...)
		}
		if s.CardsErr != "" {
			add("GPU %s", escape.Text(s.CardsErr))
		}
	}
	if !s.CardsAt.IsZero() && s.At.Sub(s.CardsAt) >= time.Second {
		add("(GPUs read %s ago)", Duration(s.At.Sub(s.CardsAt)))
	}

	// The journal.
	if len(s.Jobs) > 0 || s.JournalNote != "" {
		add("last jobs:")
	}
	for _, r := range s.Jobs {
		out = append(out, "  "+jobLine(r))
	}
	if s.JournalNote != "" {
		add("  %s", escape.Text(s.JournalNote))
	}
	return out
}

// lockLines are a lock's lines: "lock: free", "lock: held by
// channels/ep12 (pid 4242) for 3m12s, deadline 20:40:00 (in 8m55s)",
// "lock: stale: ...; why", and a line per sharer of a shared lock.
func lockLines(prefix string, st *lock.Status, now time.Time) []string {
	switch st.State {
	case lock.StateFree:
		return []string{prefix + "free"}
	case lock.StateStale:
		return []string{prefix + "stale: " + st.Holder() + "; " + escape.Text(st.Reason)}
	}
	var b strings.Builder
	b.WriteString(prefix)
	if st.Info != nil && st.Info.Cover {
		b.WriteString("held for the GPU locks beside it, named by ")
	} else {
		b.WriteString("held by ")
	}
	b.WriteString(st.Holder()) // escaped (lock.Info.Holder)
	if st.Info != nil {
		if t := st.Info.Acquired(); !t.IsZero() {
			b.WriteString(" for " + Duration(now.Sub(t)))
		}
		if d := st.Info.DeadlineTime(); !d.IsZero() {
			fmt.Fprintf(&b, ", deadline %s (in %s)", d.Local().Format("15:04:05"), Duration(d.Sub(now)))
		} else {
			b.WriteString(", no deadline")
		}
	}
	if st.HolderProcess == lock.ProcStopped || st.JobProcess == lock.ProcStopped {
		b.WriteString(", STOPPED")
	}
	if st.HolderProcess == lock.ProcGone {
		b.WriteString(", its gpuexec gone, its job runs on")
	}
	lines := []string{b.String()}
	if st.Info != nil && st.Info.Share {
		for _, sh := range st.Sharers {
			if sh.Unopened {
				lines = append(lines, "  sharer: a sidecar this user may not read")
				continue
			}
			l := fmt.Sprintf("  sharer %s: budget %s", sh.Name(), gpu.MiB(sh.MiB))
			if sh.UsedMiB > 0 {
				l += fmt.Sprintf(", using %s", gpu.MiB(sh.UsedMiB))
			}
			if sh.Over {
				l += ": OVER BUDGET"
			}
			lines = append(lines, l)
		}
	}
	return lines
}

// queueLines are the live waiters: "queue: empty", or "queue (2):" and
// "  1. reels/tts (pid 77) waited 1m02s" per waiter (with devices, the
// device locks it waits for). A ticket records no --wait, so what is left
// of it is not shown.
func queueLines(q []lock.Waiter, now time.Time, devices bool) []string {
	var ls []string
	for _, w := range q {
		if !w.Alive {
			continue
		}
		l := fmt.Sprintf("  %d. %s/%s (pid %d", w.Position, escape.Text(w.Owner), escape.Text(w.Slug), w.PID)
		if !proc.SameHost(w.Host) {
			l += " on " + escape.Text(w.Host)
		}
		l += ")"
		if t, err := time.Parse(time.RFC3339Nano, w.Since); err == nil {
			l += " waited " + Duration(now.Sub(t))
		}
		if devices && len(w.Locks) > 0 {
			names := make([]string, len(w.Locks))
			for i, n := range w.Locks {
				names[i] = escape.Text(n)
			}
			l += " for " + strings.Join(names, ",")
		}
		if w.Process == lock.ProcStopped {
			l += ", STOPPED"
		}
		ls = append(ls, l)
	}
	if len(ls) == 0 {
		return []string{"queue: empty"}
	}
	return append([]string{fmt.Sprintf("queue (%d):", len(ls))}, ls...)
}

// cardLines are a card's lines: "GPU 0 NVIDIA GeForce RTX 3080", its
// memory "  [#####.....] 9.6 GiB of 10.0 GiB used", and a line per process
// (see gpu.Attributed.Describe).
func cardLines(c gpu.Card, width int) []string {
	m := c.Memory
	head := fmt.Sprintf("GPU %d %s", c.Index, escape.Text(c.Name))
	switch c.MIG {
	case gpu.MIGOn:
		head += " (MIG mode: the whole card's figures)"
	case gpu.MIGUnknown:
		head += " (MIG mode unknown)"
	}
	lines := []string{head}
	if !m.Used.Known() || !m.Total.Known() || m.Total <= 0 {
		lines = append(lines, "  memory: "+m.Used.String()+" of "+m.Total.String()+" used")
	} else {
		text := fmt.Sprintf(" %s of %s used", m.Used, m.Total)
		n := min(width-4-uniseg.StringWidth(text), 40)
		lines = append(lines, "  "+Bar(int64(m.Used), int64(m.Total), n)+text)
	}
	switch {
	case c.Processes == nil:
		lines = append(lines, "  processes: unknown")
	case len(c.Processes) == 0:
		lines = append(lines, "  no process")
	}
	for _, p := range c.Processes {
		// Describe escapes the job's owner and slug; the process name
		// is the OS's, made printable by the source, escaped again
		// here, which leaves printable text alone.
		lines = append(lines, "  "+escape.Text(p.Describe()))
	}
	return lines
}

// Bar is a memory bar of n columns, brackets included: "[####......]"
// with used of total filled; "" when n is under 3.
func Bar(used, total int64, n int) string {
	if n < 3 {
		return ""
	}
	inner := n - 2
	fill := 0
	if total > 0 && used > 0 {
		fill = int(min(used, total) * int64(inner) / total)
		if fill == 0 {
			fill = 1 // something is used: show it
		}
	}
	return "[" + strings.Repeat("#", fill) + strings.Repeat(".", inner-fill) + "]"
}

// jobLine is one job of the journal: "20:31 ok        channels/ep12
// waited 4s held 12m03s peak 8.6 GiB".
func jobLine(r journal.Record) string {
	outcome := string(r.Outcome)
	if r.Outcome == journal.Failed {
		outcome = fmt.Sprintf("failed %d", r.Status)
	}
	l := fmt.Sprintf("%s %-11s %s/%s waited %s", r.Ended.Local().Format("15:04"), escape.Text(outcome),
		escape.Text(r.Owner), escape.Text(r.Slug), Duration(time.Duration(r.WaitedMS)*time.Millisecond))
	if r.Outcome.Ran() && r.Started != nil {
		l += " held " + Duration(time.Duration(r.HeldMS)*time.Millisecond)
	}
	if r.PeakMiB != nil {
		l += " peak " + gpu.MiB(*r.PeakMiB).String()
	}
	return l
}

// Duration is d for a glance, in whole seconds, as report writes one:
// "45s", "3m12s", "2h05m", "3d04h"; a negative d (a clock ahead of
// another) is "0s".
func Duration(d time.Duration) string {
	return report.Duration(max(d, 0).Truncate(time.Second).Milliseconds())
}

// Cut is s cut to at most width columns (a grapheme cluster is kept
// whole or left out; a wide one takes two columns), "…" at the end of a
// line that was cut.
func Cut(s string, width int) string {
	if width <= 0 {
		return ""
	}
	if uniseg.StringWidth(s) <= width {
		return s
	}
	var b strings.Builder
	cols := 0
	state := -1
	rest := s
	for len(rest) > 0 {
		var cluster string
		var w int
		cluster, rest, w, state = uniseg.FirstGraphemeClusterInString(rest, state)
		if cols+w > width-1 {
			break
		}
		b.WriteString(cluster)
		cols += w
	}
	b.WriteString("…")
	return b.String()
}
