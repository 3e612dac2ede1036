//go:build linux

package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// pct is the p-quantile of sorted, nearest rank.
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func sorted(ds []time.Duration) []time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s
}

// ms formats d in milliseconds with three significant digits or so.
func ms(d time.Duration) string {
	v := d.Seconds() * 1000
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func ratio(x, y time.Duration) string {
	if y <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", float64(x)/float64(y))
}

// mb is kB (KiB, as /proc says) in MB of 10^6 bytes.
func mb(kB int64) string { return fmt.Sprintf("%.1f MB", float64(kB)*1024/1e6) }

// row is one line of the table: a cell per contender, the target and
// whether gpuexec meets it ("" when there is no target).
type row struct {
	name   string
	cells  []string
	target string
	met    string
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// cellFor fills a row's cells with f for the contenders that have m, and
// N/A or error for the others.
func (b *bench) cellFor(m byte, f func(c *contender) string) []string {
	var cells []string
	for _, c := range b.cs {
		switch {
		case c.missing != "":
			cells = append(cells, "N/A ("+c.missing+")")
		case c.errs[m] != "":
			cells = append(cells, "error (see stderr)")
		default:
			cells = append(cells, f(c))
		}
	}
	return cells
}

// ok reports whether contender i has m measured.
func (b *bench) ok(i int, m byte) bool {
	c := b.cs[i]
	return c.missing == "" && c.errs[m] == ""
}

func (b *bench) rows() []row {
	sel := b.cfg.sel
	gx, fl := b.cs[0], b.cs[1]
	var rows []row
	if sel['a'] {
		med := func(c *contender) time.Duration { return pct(sorted(c.overhead), 0.5) }
		r := row{name: "(a) overhead of `-- true`, uncontended, ms: median (min–p90)"}
		r.cells = b.cellFor('a', func(c *contender) string {
			s := sorted(c.overhead)
			return fmt.Sprintf("%s (%s–%s)", ms(pct(s, 0.5)), ms(s[0]), ms(pct(s, 0.9)))
		})
		rows = append(rows, r)
		r = row{name: "(a) overhead median ÷ flock's", target: "≤ 1.5×"}
		if b.ok(1, 'a') {
			r.cells = b.cellFor('a', func(c *contender) string { return ratio(med(c), med(fl)) })
			if b.ok(0, 'a') {
				r.met = yesNo(float64(med(gx)) <= 1.5*float64(med(fl)))
			}
		} else {
			r.cells = b.cellFor('a', func(*contender) string { return "–" })
		}
		rows = append(rows, r)
		if len(b.floor) > 0 {
			// The floors are shown in the gpuexec column.
			gxOnly := func(v string) func(*contender) string {
				return func(c *contender) string {
					if c != gx {
						return "–"
					}
					return v
				}
			}
			// A Go program linking gpuexec's libraries that only runs
			// true.
			floor := pct(sorted(b.floor), 0.5)
			v := ms(floor)
			if b.ok(1, 'a') {
				v += " (" + ratio(floor, med(fl)) + ")"
			}
			rows = append(rows, row{name: "(a) floor: Go with gpuexec's libraries, only running `true`: median, ÷ flock's",
				cells: b.cellFor('a', gxOnly(v)), target: "–", met: "–"})
			r = row{name: "(a) overhead median ÷ the Go floor's", target: "≤ 1.25×", met: "–"}
			if b.ok(0, 'a') {
				r.cells = b.cellFor('a', gxOnly(ratio(med(gx), floor)))
				r.met = yesNo(float64(med(gx)) <= 1.25*float64(floor))
			} else {
				r.cells = b.cellFor('a', gxOnly("–"))
			}
			rows = append(rows, r)
			if len(b.lockedFloor) > 0 {
				// The same, also catching gpuexec's signals and taking
				// and giving back the lock with the core of its file
				// work.
				locked := pct(sorted(b.lockedFloor), 0.5)
				rows = append(rows, row{name: "(a) floor with the lock's file work and signals (`floor -lock`): median, ÷ the Go floor's",
					cells: b.cellFor('a', gxOnly(ms(locked)+" ("+ratio(locked, floor)+")")), target: "–", met: "–"})
			}
		}
	}
	if sel['b'] {
		p := func(c *contender, q float64) time.Duration { return pct(sorted(c.gaps), q) }
		for _, q := range []struct {
			name   string
			q      float64
			target string
		}{
			{"p50", 0.5, "≤ 1.5× flock's"},
			{"p90", 0.9, ""},
			{"p99", 0.99, "≤ 20 ms"},
			{"max", 1, ""},
		} {
			r := row{name: "(b) handoff gap " + q.name + ", ms", target: q.target}
			r.cells = b.cellFor('b', func(c *contender) string {
				if len(c.gaps) == 0 {
					return "no handoffs"
				}
				return ms(p(c, q.q))
			})
			if b.ok(0, 'b') && len(gx.gaps) > 0 {
				switch q.name {
				case "p50":
					if b.ok(1, 'b') && len(fl.gaps) > 0 {
						r.target = fmt.Sprintf("≤ 1.5× flock's (≤ %s)", ms(p(fl, 0.5)*3/2))
						r.met = yesNo(float64(p(gx, 0.5)) <= 1.5*float64(p(fl, 0.5)))
					}
				case "p99":
					r.met = yesNo(p(gx, 0.99) <= 20*time.Millisecond)
				}
			}
			rows = append(rows, r)
		}
		r := row{name: "(b) handoff gap p50 ÷ flock's", target: "≤ 1.5×"}
		r.cells = b.cellFor('b', func(c *contender) string {
			if !b.ok(1, 'b') || len(fl.gaps) == 0 || len(c.gaps) == 0 {
				return "–"
			}
			return ratio(p(c, 0.5), p(fl, 0.5))
		})
		if b.ok(0, 'b') && b.ok(1, 'b') && len(gx.gaps) > 0 && len(fl.gaps) > 0 {
			r.met = yesNo(float64(p(gx, 0.5)) <= 1.5*float64(p(fl, 0.5)))
		}
		rows = append(rows, r)
		r = row{name: "(b) CPU per critical section (wrapper, its child, the loop), ms", target: "–", met: "–"}
		r.cells = b.cellFor('b', func(c *contender) string {
			if c.cycles == 0 {
				return "–"
			}
			return ms(c.cycleCPU / time.Duration(c.cycles))
		})
		rows = append(rows, r)
	}
	if sel['b'] || sel['f'] {
		from := map[bool]string{true: "b and f", false: "b"}[sel['f']]
		if !sel['b'] {
			from = "f"
		}
		r := row{name: "(c) overlapping critical sections (in " + from + ")", target: "0"}
		r.cells = b.cellFor('c', func(c *contender) string { return fmt.Sprintf("%d of %d", c.overlaps, c.sections) })
		if b.cs[0].missing == "" {
			r.met = yesNo(gx.overlaps == 0 && gx.sections > 0)
		}
		rows = append(rows, r)
	}
	if sel['d'] {
		r := row{name: fmt.Sprintf("(d) CPU of one waiter over %s of waiting", b.cfg.waitCPU), target: "< 1% of a core"}
		pc := func(c *contender) float64 { return 100 * c.cpu.Seconds() / c.waited.Seconds() }
		r.cells = b.cellFor('d', func(c *contender) string {
			return fmt.Sprintf("%.2f s (%.2f%% of a core)", c.cpu.Seconds(), pc(c))
		})
		if b.ok(0, 'd') {
			r.met = yesNo(pc(gx) < 1)
		}
		rows = append(rows, r)
	}
	if sel['e'] {
		r := row{name: "(e) RSS of the wrapper while its child runs: VmRSS (VmHWM)", target: "≤ 15 MB"}
		r.cells = b.cellFor('e', func(c *contender) string { return fmt.Sprintf("%s (%s)", mb(c.rssKB), mb(c.hwmKB)) })
		if b.ok(0, 'e') {
			r.met = yesNo(float64(gx.rssKB)*1024 <= 15e6)
		}
		rows = append(rows, r)
	}
	if sel['f'] {
		r := row{name: fmt.Sprintf("(f) FIFO: arrival order of %d queued waiters kept", b.cfg.fifoWaiters),
			target: fmt.Sprintf("%d/%d", b.cfg.fifoRounds, b.cfg.fifoRounds)}
		r.cells = b.cellFor('f', func(c *contender) string { return fmt.Sprintf("%d/%d", c.fifoKept, c.fifoRounds) })
		if b.ok(0, 'f') {
			r.met = yesNo(gx.fifoKept == b.cfg.fifoRounds && gx.fifoRounds == b.cfg.fifoRounds)
		}
		rows = append(rows, r)
	}
	if sel['g'] {
		rows = append(rows, b.chainRows()...)
	}
	if sel['h'] {
		rows = append(rows, b.queuedCPURows()...)
	}
	return rows
}

// chainRows are (g)'s: the gap's p50 and p90, each with its ratio to
// flock's, and the overlaps.
func (b *bench) chainRows() []row {
	gx, fl := b.cs[0], b.cs[1]
	p := func(c *contender, q float64) time.Duration { return pct(sorted(c.chainGaps), q) }
	has := func(i int) bool { return b.ok(i, 'g') && len(b.cs[i].chainGaps) > 0 }
	var rows []row
	for _, q := range []struct {
		name   string
		q, max float64
	}{
		{"p50", 0.5, 1.5},
		{"p90", 0.9, 2},
	} {
		r := row{
			name:   fmt.Sprintf("(g) pre-queued chain gap %s, ms (÷ flock's): %d waiters holding %s", q.name, b.cfg.chainWaiters, b.cfg.chainHold),
			target: fmt.Sprintf("≤ %g× flock's", q.max),
		}
		r.cells = b.cellFor('g', func(c *contender) string {
			if len(c.chainGaps) == 0 {
				return "no handoffs"
			}
			s := ms(p(c, q.q))
			if has(1) {
				s += " (" + ratio(p(c, q.q), p(fl, q.q)) + ")"
			}
			return s
		})
		if has(1) {
			limit := time.Duration(q.max * float64(p(fl, q.q)))
			r.target += fmt.Sprintf(" (≤ %s)", ms(limit))
			if has(0) {
				r.met = yesNo(p(gx, q.q) <= limit)
			}
		}
		rows = append(rows, r)
	}
	r := row{name: "(g) overlapping critical sections in the chain", target: "0"}
	r.cells = b.cellFor('g', func(c *contender) string { return fmt.Sprintf("%d of %d", c.chainOverlaps, c.chainSections) })
	if b.ok(0, 'g') {
		r.met = yesNo(gx.chainOverlaps == 0 && gx.chainSections > 0)
	}
	return append(rows, r)
}

// queuedCPURows are (h)'s: a row per number of waiters.
func (b *bench) queuedCPURows() []row {
	var rows []row
	for _, n := range b.cfg.cpuWaiters {
		waiters := "waiters"
		if n == 1 {
			waiters = "waiter"
		}
		r := row{name: fmt.Sprintf("(h) CPU of %d queued %s together over %s of waiting: %% of a core (CPU s)", n, waiters, b.cfg.waitCPU)}
		pc := func(w waitersCPU) float64 { return 100 * w.cpu.Seconds() / w.waited.Seconds() }
		for _, c := range b.cs {
			w, ok := c.queuedCPU[n]
			switch {
			case c.missing != "":
				r.cells = append(r.cells, "N/A ("+c.missing+")")
			case !ok:
				r.cells = append(r.cells, "–")
			case w.skipped != "":
				r.cells = append(r.cells, w.skipped)
			case w.err != "":
				r.cells = append(r.cells, "error (see stderr)")
			default:
				r.cells = append(r.cells, fmt.Sprintf("%.2f%% (%.2f s)", pc(w), w.cpu.Seconds()))
			}
		}
		if n == 100 {
			r.target = "< 1% of a core"
			if w, ok := b.cs[0].queuedCPU[n]; ok && b.cs[0].missing == "" && w.err == "" && w.skipped == "" {
				r.met = yesNo(pc(w) < 1)
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// report prints the machine line, the table and the notes.
func (b *bench) report(w io.Writer) {
	fmt.Fprintln(w, b.machineLine())
	fmt.Fprintln(w)
	if slices.ContainsFunc([]byte("abcdefgh"), func(m byte) bool { return b.cfg.sel[m] }) {
		b.reportAH(w)
	}
	if b.cfg.sel['i'] {
		b.dayReport(w)
	}
}

// reportAH prints the table and notes of a to h.
func (b *bench) reportAH(w io.Writer) {
	head := []string{"measurement"}
	for _, c := range b.cs {
		head = append(head, c.name)
	}
	head = append(head, "target", "gpuexec meets it")
	fmt.Fprintf(w, "| %s |\n", strings.Join(head, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(head)))
	for _, r := range b.rows() {
		cells := append(append([]string{r.name}, r.cells...), orDash(r.target), orDash(r.met))
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
	for _, n := range b.notes() {
		fmt.Fprintln(w, "- "+n)
	}
	fmt.Fprintln(w)
}

// binaryNote describes the gpuexec binary measured.
func (b *bench) binaryNote() string {
	cfg := b.cfg
	g := fmt.Sprintf("binary %s", mb(b.gpuexec.size/1024))
	if b.gpuexec.built {
		g += ", built from this checkout"
	} else {
		g += ", " + b.cs[0].bin
	}
	if b.gpuexec.rev != "" {
		g += " at " + b.gpuexec.rev
	}
	if b.gpuexec.built && (cfg.tags != "" || cfg.ldflags != "") {
		g += fmt.Sprintf(" (-tags %q -ldflags %q)", cfg.tags, cfg.ldflags)
	}
	return g + "."
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func (b *bench) notes() []string {
	cfg, sel := b.cfg, b.cfg.sel
	notes := []string{"gpuexec: `--poll 20s`, other flags default; " + b.binaryNote()}
	if b.cs[2].missing == "" {
		var used []string
		if sel['b'] || sel['f'] {
			used = append(used, fmt.Sprintf("%s in (b) and (f)", cfg.seedHandoffPoll))
		}
		if sel['g'] {
			used = append(used, fmt.Sprintf("%s in (g)", cfg.seedHandoffPoll))
		}
		var dh []string
		if sel['d'] {
			dh = append(dh, "(d)")
		}
		if sel['h'] {
			dh = append(dh, "(h)")
		}
		if len(dh) > 0 {
			used = append(used, fmt.Sprintf("%s in %s", cfg.seedPoll, strings.Join(dh, " and ")))
		}
		if len(used) > 0 {
			notes = append(notes, "seed: lock/testdata/seedlock.cjs with SEEDLOCK_POLL_MS = "+strings.Join(used, ", ")+
				". It polls, so its handoff gap scales with its poll (at the seed's own 20 s, waiters wait seconds for a free lock); it has no queue, so (f) shows whatever order its polls fall in.")
		}
	}
	if sel['a'] {
		n := fmt.Sprintf("(a) %d runs of each, interleaved; wall time from start to exit, including the exec of `true`", cfg.runs)
		if len(b.bare) > 0 {
			s := sorted(b.bare)
			n += fmt.Sprintf(" (`true` alone: median %s ms, min %s)", ms(pct(s, 0.5)), ms(s[0]))
		}
		if b.cs[2].missing == "" {
			n += "; seed: `node seedlock.cjs run L bench overhead 0` (start node, acquire, hold 0 ms, release; no child)"
		}
		if len(b.floor) > 0 {
			n += "; floor: bench/floor (a Go program linking urfave/cli, hclog and x/sys, as gpuexec does on Linux, that only runs its argument), built like gpuexec, run as `floor true`"
		}
		if len(b.lockedFloor) > 0 {
			n += "; `floor -lock L true` also catches the 7 signals gpuexec catches and, under the guard, creates and locks a liveness file and creates the record, and gives them back after `true` as gpuexec does (liveness file removed, record read and renamed aside under the guard, then deleted): the core of the lock's work, without gpuexec's folder listings, permission setting and notes of the job's group, and with no command line, no checks and no supervision"
		}
		notes = append(notes, n+".")
	}
	if sel['b'] {
		var counts []string
		for _, c := range b.available() {
			counts = append(counts, fmt.Sprintf("%s %d of %d", c.name, c.handoffs, c.handoffs+c.unqueued))
		}
		notes = append(notes, fmt.Sprintf("(b) %d contenders x %d cycles holding %s, in %d round(s) taking turns; the section is a re-executed Go program, so a gap includes the wrapper's start of its child. Gaps counted where the next wrapper was started before the previous section began (a waiter was queued): %s. CPU per section: utime+stime of the loop processes, which count every wrapper they reaped and its child, over the sections.",
			cfg.contenders, cfg.cycles, cfg.hold, handoffRounds(cfg.cycles), strings.Join(counts, ", ")))
	}
	if sel['d'] {
		notes = append(notes, "(d) utime+stime of the waiting process (gpuexec, flock, node) from /proc/PID/stat, from when it is seen queued to the end of the wait (10 ms ticks; its start-up excluded).")
	}
	if sel['e'] {
		notes = append(notes, "(e) /proc/PID/status of the process holding the lock (gpuexec, flock, node) while its child (or hold) runs; MB = 10^6 bytes.")
	}
	if sel['g'] {
		var counts []string
		for _, c := range b.available() {
			counts = append(counts, fmt.Sprintf("%s %d", c.name, len(c.chainGaps)))
		}
		seedStep := ""
		if b.cs[2].missing == "" {
			seedStep = " The seed's waiters, started together, tend to poll in step, so its gap is often about a poll less the hold."
		}
		notes = append(notes, fmt.Sprintf("(g) lockbench-style: per round, a holder takes the lock, then %d wrappers around the critical section (as in (b), holding %s; the seed's run mode holding %s with the truth file) are started at once; once all are seen queued (gpuexec: %d tickets `gpu.lock.ticket-*` beside the lock; flock(1): all blocked in flock(2) per /proc/locks; seed: each printed its first \"waiting\" line) and %s more, the holder releases. Gap = a section's start minus the previous one's end, sorted by start; the first section (after the holder) not counted. %d round(s) pooled, the contenders taking turns; gaps: %s.",
			cfg.chainWaiters, cfg.chainHold, cfg.chainHold, cfg.chainWaiters, settle, cfg.chainRounds, strings.Join(counts, ", "))+seedStep)
	}
	if sel['h'] {
		notes = append(notes, fmt.Sprintf("(h) N waiters (`gpuexec --lock L --poll 20s -- true`, `flock L true`, the seed's run mode holding 0 ms) started at once behind a holder, all contenders at once, each on its own lock; once all are seen queued (as in (g)) and %s more, the sum of their utime+stime is read from /proc/PID/stat, and again %s later (start-up excluded; 10 ms ticks); %% of a core = that CPU ÷ the wall time. Then the holder releases and every waiter must exit 0 (the seed's are stopped with SIGTERM instead: at a 20 s poll they would drain one poll each). The seed is skipped above %d waiters: each is a polling node process (~40 MB).",
			settle, cfg.waitCPU, seedMaxCPUWaiters))
	}
	return notes
}
