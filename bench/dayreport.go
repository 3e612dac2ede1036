//go:build linux

package main

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"
)

// secs formats d in seconds, two decimals.
func secs(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }

// dayReport prints (i)'s table and notes.
func (b *bench) dayReport(w io.Writer) {
	cfg := b.cfg
	jobs := dayJobs(cfg.dayScale)
	fmt.Fprintf(w, "(i) a day of %d jobs on a fake 24 GiB card, times ÷ %g; lower bound %s s\n\n", len(jobs), cfg.dayScale, secs(b.dayLB))
	if b.dayErr != "" {
		fmt.Fprintf(w, "(i) not measured: %s\n\n", firstLineOf(b.dayErr))
		b.daySimTable(w)
		return
	}
	if len(b.dayRuns) > 0 {
		b.dayTable(w, jobs)
	}
	b.daySimTable(w)
	for _, n := range b.dayNotes(jobs) {
		fmt.Fprintln(w, "- "+n)
	}
}

// dayTable prints (i)'s measured table, a row per policy and variant run.
func (b *bench) dayTable(w io.Writer, jobs []dayJob) {
	head := []string{"(i) policy", "arrivals", "makespan, s", "÷ lower bound", "memory-time utilisation"}
	for _, c := range dayClasses {
		head = append(head, c.name+" wait p50 / max, s")
	}
	head = append(head, "shortest wait, s", "start to next start p50, s", "samples over usable (peak MiB)", "samples with > 1 job", "jobs exit 0")
	fmt.Fprintf(w, "| %s |\n", strings.Join(head, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(head)))
	for _, r := range b.dayRuns {
		cells := []string{dayPolicyNames[r.policy].name, dayVariantNames[r.variant].name}
		switch {
		case r.skipped != "":
			cells = append(cells, "N/A ("+r.skipped+")")
			for len(cells) < len(head) {
				cells = append(cells, "–")
			}
		case r.err != "":
			cells = append(cells, "error (see stderr)")
			for len(cells) < len(head) {
				cells = append(cells, "–")
			}
		default:
			f := r.fig
			cells = append(cells, secs(f.makespan), fmt.Sprintf("%.2f×", float64(f.makespan)/float64(b.dayLB)),
				fmt.Sprintf("%.0f%%", 100*f.util))
			for ci := range dayClasses {
				ws := f.waits[ci]
				if len(ws) == 0 {
					cells = append(cells, "–")
					continue
				}
				cells = append(cells, secs(pct(ws, 0.5))+" / "+secs(ws[len(ws)-1]))
			}
			cells = append(cells, secs(max(f.minWait, 0)), secs(f.startGap))
			over := fmt.Sprintf("%d of %d (%d)", f.over, f.n, f.peak)
			if f.over > 0 {
				over = "**" + over + "**"
			}
			cells = append(cells, over)
			multi := "–"
			if r.policy == pFlock || r.policy == pWhole {
				multi = fmt.Sprintf("%d", f.multi)
				if f.multi > 0 {
					multi = "**" + multi + "**"
				}
			}
			cells = append(cells, multi)
			ok := fmt.Sprintf("%d/%d", len(jobs)-len(f.failed), len(jobs))
			if len(f.failed) > 0 {
				ok = "**" + ok + "**: " + strings.Join(f.failed, "; ")
			}
			cells = append(cells, ok)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
}

// daySimTable prints the day simulated with no overhead: each row a
// policy, each variant of arrivals run its makespan and its ratio to the
// lower bound.
func (b *bench) daySimTable(w io.Writer) {
	if len(b.daySim) == 0 {
		return
	}
	head := []string{"(i) simulated, no overhead", "budgets may sum to, MiB"}
	for vi, v := range dayVariantNames {
		if b.cfg.dayVariants[vi] {
			head = append(head, v.name+": makespan, s (÷ lower bound)")
		}
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(head, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(head)))
	for _, r := range b.daySim {
		cells := []string{r.name, fmt.Sprintf("%d", r.capMiB)}
		for vi := range dayVariantNames {
			if !b.cfg.dayVariants[vi] {
				continue
			}
			if m := r.makespan[vi]; m < 0 {
				cells = append(cells, "none (a job larger than the card)")
			} else {
				cells = append(cells, fmt.Sprintf("%s (%.2f×)", secs(m), float64(m)/float64(b.dayLB)))
			}
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
}

func firstLineOf(s string) string { return strings.SplitN(s, "\n", 2)[0] }

func (b *bench) dayNotes(jobs []dayJob) []string {
	cfg := b.cfg
	var classes []string
	for _, c := range dayClasses {
		classes = append(classes, fmt.Sprintf("%d %s of %s × %s (%s)", c.count, c.name, sizeArg(c.mib), c.dur, c.scaled(cfg.dayScale)))
	}
	notes := []string{
		fmt.Sprintf("(i) jobs: %s, times ÷ %g (-day-scale). Each job is this program (BENCH_ROLE=gpujob): it notes its start, registers the memory it uses under its pid in a registry folder, growing linearly from 0 to its peak over the first tenth of its run, holds the peak, notes its end, unregisters and exits 0.",
			strings.Join(classes, ", "), cfg.dayScale),
		fmt.Sprintf("(i) the card: a fake nvidia-smi (this program, through a link named nvidia-smi, given to gpuexec with --nvidia-smi) answering gpuexec's two queries in a real driver's shape: one %s, total %d MiB, memory.reserved %d MiB (the figure of internal/gpu/gputest's RTX 4090 and of docs/gpu.md's status example), used = what the live registered pids use, free = total − reserved − used, MIG %s; checked first with `gpuexec status`. Usable = total − reserved = %d MiB. Lower bound = max(Σ peak × duration ÷ usable, longest job) = %s s. gpuexec's sharers also leave --reserve free (default 5%% of the card, about %d MiB), so they can have at most %d MiB at once; with that as usable the bound would be %s s.",
			fakeName, fakeTotalMiB, fakeReservedMiB, fakeMIG, fakeUsableMiB, secs(b.dayLB),
			fakeReserveMiB, fakeSharableMiB, secs(lowerBound(jobs, fakeSharableMiB))),
	}
	var order []string
	if len(b.dayArrivals) > 0 {
		for _, a := range b.dayArrivals[0] {
			order = append(order, jobs[a.job].name)
		}
	}
	notes = append(notes, fmt.Sprintf("(i) arrivals, seed %d (-day-seed): fixed shuffled order, a seeded permutation, one job every %s (-day-gap): %s; random arrivals: each job's drawn uniformly from [0, lower bound ÷ 2) = [0, %s s), the first moved to 0. Arrival = when the bench starts the job's wrapper; wait = the job's own start (noted first thing in the job) − its arrival, so it includes the wrapper's and the job's start-up; shortest wait: the least over all jobs (a start with no one in the way); start to next start: the median time between two consecutive job starts (a queue's pace).",
		cfg.daySeed, cfg.dayGap, strings.Join(order, " "), secs(b.dayLB/2)))
	notes = append(notes, fmt.Sprintf("(i) policies, one after another, each on a fresh lock folder and card: flock(1): `flock L JOB`; gpuexec whole card: `gpuexec --lock L --owner bench --slug CLASS-N --nvidia-smi FAKE -- JOB`; gpuexec --share --vram: the same with `--share --vram SIZE` (the class's peak: 2G, 6G, 9G); share + timeout (backfill): also `--timeout T --kill-after %s` (T = the job's duration × %g; -day-timeout-factor, -day-kill-after): the policy that backfills once gpuexec does; on a binary without backfill it is the share policy with --timeout. Every job must exit 0; a deferred, timed-out or failed job is shown and makes the bench fail.",
		cfg.dayKillAfter, cfg.dayTimeoutFactor))
	notes = append(notes, fmt.Sprintf("(i) simulated, no overhead: the same jobs and arrivals scheduled on paper — each start at the instant its rule allows it, each job exactly its duration, holding its budget (its peak) from start to end — so that a measured makespan splits into what its policy allows and what starting the jobs costs. Strict FIFO: the first waiter starts as soon as its budget fits, nobody passes it. Backfill: also a waiter at most %d behind the first (the first counted) whose budget fits now and whose deadline (start + the share + timeout policy's --timeout and --kill-after) is no later than the time the first could start by the holders' deadlines: gpuexec's rule. Best list schedule found: every job known in advance, any arrived waiter whose budget fits starts, in a priority order — the best of arrival order, largest memory × time, longest and largest budget first, and %d seeded random orders; it is a schedule that exists, so the best possible is no longer (schedules that leave room idle on purpose are not tried). The budgets may sum to %d MiB (the usable memory less gpuexec's default --reserve) or %d MiB (all of the usable memory); the ratios are to the lower bound above.",
		simMaxPass, simTries, fakeSharableMiB, fakeUsableMiB))
	notes = append(notes, "(i) gpuexec: "+b.binaryNote())
	var walls []string
	var total time.Duration
	for _, r := range b.dayRuns {
		if r.wall > 0 {
			walls = append(walls, fmt.Sprintf("%s/%s %.1f s", dayVariantNames[r.variant].flag, dayPolicyNames[r.policy].flag, r.wall.Seconds()))
			total += r.wall
		}
	}
	notes = append(notes, fmt.Sprintf("(i) the sampler reads the registry every %s (-day-sample; live pids only); makespan = first arrival to the last job's end; memory-time utilisation = the integral of the registry's sum over the makespan ÷ (usable × makespan); samples over usable: the sum above %d MiB (must be 0), with the largest sum seen; samples with > 1 job: for flock(1) and whole card (must be 0). Load average at the start of (i): %s. Wall time per run: %s (%.0f s in all).",
		cfg.daySample, fakeUsableMiB, orDash(b.dayLoad), strings.Join(walls, ", "), total.Seconds()))
	return notes
}

// dayChart is a small self-contained SVG bar chart: the makespan of each
// policy, one group of bars per variant of arrivals, the lower bound as a
// dashed line across each group.
func dayChart(runs []*dayRun, lb time.Duration) string {
	const (
		width, height         = 760, 380
		left, right, top, bot = 60, 20, 40, 90
		barW, barGap, grpGap  = 56, 10, 50
	)
	colors := []string{"#8c8c8c", "#4e79a7", "#f28e2b", "#59a14f"}
	var variants []int
	byVariant := map[int][]*dayRun{}
	top_ := lb
	for _, r := range runs {
		if _, ok := byVariant[r.variant]; !ok {
			variants = append(variants, r.variant)
		}
		byVariant[r.variant] = append(byVariant[r.variant], r)
		top_ = max(top_, r.fig.makespan)
	}
	ymax := float64(top_) * 1.15
	plotH := float64(height - top - bot)
	y := func(d time.Duration) float64 { return float64(top) + plotH - plotH*float64(d)/ymax }
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&s, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&s, `<text x="%d" y="20" font-size="14">A day of jobs: makespan per policy, s (dashed: the lower bound, %s s)</text>`+"\n", left, secs(lb))
	// The axis, with a tick per second or so.
	step := niceStep(ymax / 1e9 / 6)
	for v := 0.0; v <= ymax/1e9; v += step {
		yy := y(time.Duration(v * 1e9))
		fmt.Fprintf(&s, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0"/>`+"\n", left, yy, width-right, yy)
		fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", left-6, yy+4, v)
	}
	fmt.Fprintf(&s, `<line x1="%d" y1="%d" x2="%d" y2="%.1f" stroke="black"/>`+"\n", left, top, left, y(0))
	x := float64(left + 20)
	for _, v := range variants {
		rs := byVariant[v]
		x0 := x
		for _, r := range rs {
			d := r.fig.makespan
			label := secs(d)
			if r.skipped != "" || r.err != "" {
				d, label = 0, "N/A"
			}
			fmt.Fprintf(&s, `<rect x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s, %s: %s s</title></rect>`+"\n",
				x, y(d), barW, y(0)-y(d), colors[int(r.policy)%len(colors)],
				html.EscapeString(dayPolicyNames[r.policy].name), html.EscapeString(dayVariantNames[v].name), label)
			fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x+barW/2, y(d)-4, label)
			x += barW + barGap
		}
		x1 := x - barGap
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="2" stroke-dasharray="6 4"/>`+"\n", x0-6, y(lb), x1+6, y(lb))
		fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, y(0)+18, html.EscapeString(dayVariantNames[v].name))
		x += grpGap
	}
	// The legend.
	lx := float64(left)
	for p, n := range dayPolicyNames {
		fmt.Fprintf(&s, `<rect x="%.1f" y="%d" width="12" height="12" fill="%s"/>`+"\n", lx, height-40, colors[p%len(colors)])
		fmt.Fprintf(&s, `<text x="%.1f" y="%d">%s</text>`+"\n", lx+16, height-30, html.EscapeString(n.name))
		lx += 30 + 7*float64(len(n.name))
	}
	s.WriteString("</svg>\n")
	return s.String()
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for p > v {
		p /= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
