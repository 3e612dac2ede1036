//go:build linux

package main

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gpuexec/gpuexec/lock"
)

// (i), simulated: the same day scheduled with no overhead at all — every
// start at the instant it is allowed, every job exactly its duration, each
// holding its budget from start to end — so that a measured makespan can be
// split into what the policy allows and what starting jobs costs.

// simPolicy is a scheduling rule the simulator follows.
type simPolicy int

const (
	// simSerial: one job at a time, in order of arrival (flock(1), a
	// whole card).
	simSerial simPolicy = iota
	// simFIFO: strict first come, first served sharing: the first waiter
	// starts as soon as its budget fits; nobody passes it.
	simFIFO
	// simBackfill: simFIFO, and a waiter at most simMaxPass behind the first
	// may start ahead of it when its budget fits now and its deadline
	// (start + timeout + kill-after) is no later than the earliest time
	// the first could start by the holders' deadlines: gpuexec's rule.
	simBackfill
	// simList: list scheduling in a priority order, any waiter whose
	// budget fits starts (nobody is bound to wait for anyone); with the
	// best of many orders, what an offline scheduler could find.
	simList
)

// simJob is one job to the simulator: its budget, its duration, when it
// arrives, and how long after its start it is stopped at the latest (its
// timeout and kill-after; 0 for none).
type simJob struct {
	mib     int64
	dur     time.Duration
	arrive  time.Duration
	timeout time.Duration
}

// simMaxPass is how many waiters a backfiller may pass (lock's
// maxBackfillPass).
const simMaxPass = 8

// simulate is the makespan (the first arrival to the last end) of jobs on
// a card with capMiB for their budgets, under p. For simList, order is the
// priority (indexes into jobs); for the others, arrival order decides, ties
// by index. A job needing more than capMiB is never started: the makespan
// is then -1.
func simulate(jobs []simJob, capMiB int64, p simPolicy, order []int) time.Duration {
	m, _ := simStarts(jobs, capMiB, p, order)
	return m
}

// simStarts is simulate's makespan and each job's start (after the first
// arrival; nil with a makespan of -1).
func simStarts(jobs []simJob, capMiB int64, p simPolicy, order []int) (time.Duration, []time.Duration) {
	if len(jobs) == 0 {
		return 0, nil
	}
	for _, j := range jobs {
		if j.mib > capMiB {
			return -1, nil
		}
	}
	starts := make([]time.Duration, len(jobs))
	type running struct {
		end, deadline time.Duration
		mib           int64
	}
	// queue: waiters in priority order; pending: not yet arrived, by
	// arrival.
	prio := make([]int, len(jobs))
	if p == simList && len(order) == len(jobs) {
		copy(prio, order)
	} else {
		for i := range prio {
			prio[i] = i
		}
		slices.SortStableFunc(prio, func(a, b int) int { return cmp.Compare(jobs[a].arrive, jobs[b].arrive) })
	}
	rank := make([]int, len(jobs))
	for r, i := range prio {
		rank[i] = r
	}
	pending := make([]int, len(jobs))
	for i := range pending {
		pending[i] = i
	}
	slices.SortStableFunc(pending, func(a, b int) int { return cmp.Compare(jobs[a].arrive, jobs[b].arrive) })
	first := jobs[pending[0]].arrive
	var (
		queue []int
		run   []running
		used  int64
		now   = first
		last  = first
	)
	start := func(qi int) {
		j := jobs[queue[qi]]
		starts[queue[qi]] = now - first
		dl := time.Duration(0)
		if j.timeout > 0 {
			dl = now + j.timeout
		}
		run = append(run, running{end: now + j.dur, deadline: dl, mib: j.mib})
		used += j.mib
		queue = slices.Delete(queue, qi, qi+1)
	}
	// passes is gpuexec's rule itself (lock.Ahead.Passes): whether the
	// waiter at qi, started now, is stopped no later than the first could
	// start by the holders' deadlines. Times are the simulator's, from an
	// arbitrary instant.
	base := time.Unix(0, 0).UTC()
	passes := func(qi int) bool {
		sharers := make([]lock.Sharer, len(run))
		for i, r := range run {
			sharers[i].MiB = r.mib
			if r.deadline > 0 {
				sharers[i].Deadline = base.Add(r.deadline).Format(time.RFC3339Nano)
			}
		}
		head := lock.Ahead{MiB: jobs[queue[0]].mib, Ends: base.Add(now + jobs[queue[qi]].timeout)}
		return head.Passes(base.Add(now), capMiB-used, sharers)
	}
	for len(pending) > 0 || len(queue) > 0 || len(run) > 0 {
		// Ends and arrivals at now.
		kept := run[:0]
		for _, r := range run {
			if r.end <= now {
				used -= r.mib
				last = max(last, r.end)
				continue
			}
			kept = append(kept, r)
		}
		run = kept
		for len(pending) > 0 && jobs[pending[0]].arrive <= now {
			queue = append(queue, pending[0])
			pending = pending[1:]
		}
		slices.SortStableFunc(queue, func(a, b int) int { return cmp.Compare(rank[a], rank[b]) })
		// Starts.
		switch p {
		case simSerial:
			if len(run) == 0 && len(queue) > 0 {
				start(0)
			}
		case simFIFO, simBackfill:
			for len(queue) > 0 && used+jobs[queue[0]].mib <= capMiB {
				start(0)
			}
			for qi := 1; p == simBackfill && qi < len(queue) && qi <= simMaxPass; {
				if j := jobs[queue[qi]]; j.timeout > 0 && used+j.mib <= capMiB && passes(qi) {
					start(qi)
					continue
				}
				qi++
			}
		case simList:
			for qi := 0; qi < len(queue); {
				if used+jobs[queue[qi]].mib <= capMiB {
					start(qi)
					continue
				}
				qi++
			}
		}
		// The next event.
		next := time.Duration(-1)
		if len(pending) > 0 {
			next = jobs[pending[0]].arrive
		}
		for _, r := range run {
			if next < 0 || r.end < next {
				next = r.end
			}
		}
		if next < 0 {
			break // waiters that can never start (cannot happen: checked above)
		}
		now = next
	}
	return last - first, starts
}

// bestListSchedule is the shortest makespan simList reaches over the
// arrival order, the orders by memory-time, by duration and by memory
// (largest first), and tries random orders (seeded): a schedule an offline
// scheduler could find, so no better than the best possible.
func bestListSchedule(jobs []simJob, capMiB int64, tries int, seed uint64) time.Duration {
	n := len(jobs)
	orders := [][]int{}
	byKey := func(key func(simJob) float64) []int {
		o := make([]int, n)
		for i := range o {
			o[i] = i
		}
		slices.SortStableFunc(o, func(a, b int) int { return cmp.Compare(key(jobs[b]), key(jobs[a])) })
		return o
	}
	orders = append(orders,
		byKey(func(j simJob) float64 { return -float64(j.arrive) }),
		byKey(func(j simJob) float64 { return float64(j.mib) * float64(j.dur) }),
		byKey(func(j simJob) float64 { return float64(j.dur) }),
		byKey(func(j simJob) float64 { return float64(j.mib) }))
	r := rand.New(rand.NewPCG(seed, 0x3f))
	for range tries {
		orders = append(orders, r.Perm(n))
	}
	best := time.Duration(-1)
	for _, o := range orders {
		if m := simulate(jobs, capMiB, simList, o); m >= 0 && (best < 0 || m < best) {
			best = m
		}
	}
	return best
}

// simDay is the day's jobs as the simulator takes them: each arriving as
// arr says, stopped at the latest after the timeout the share + timeout
// policy gives it (dayTimeout) and killAfter.
func simDay(jobs []dayJob, arr []arrival, factor float64, killAfter time.Duration) []simJob {
	out := make([]simJob, len(jobs))
	for _, a := range arr {
		j := jobs[a.job]
		out[a.job] = simJob{mib: j.mib, dur: j.dur, arrive: a.at, timeout: dayTimeout(j, factor) + killAfter}
	}
	return out
}

// simTries is how many random orders bestListSchedule tries beside its
// four fixed ones.
const simTries = 20000

// simRow is one row of (i)'s simulated table: a policy with no overhead,
// the memory its budgets may sum to, and its makespan under each variant
// of arrivals (by variant; 0 where the variant was not run).
type simRow struct {
	name     string
	capMiB   int64
	makespan []time.Duration
}

// daySimRows simulates the day's jobs under each variant of arrivals run
// (variants[i]), for the policies of the measured table and the best list
// schedule found, with the memory gpuexec's sharers may hold by default
// (usable less the default --reserve) and with all of the usable memory.
func daySimRows(jobs []dayJob, arrivals [][]arrival, variants map[int]bool, factor float64, killAfter time.Duration) []simRow {
	type spec struct {
		name string
		p    simPolicy
		cap  int64
	}
	specs := []spec{{"one at a time (flock(1), whole card)", simSerial, fakeUsableMiB}}
	for _, c := range []int64{fakeSharableMiB, fakeUsableMiB} {
		specs = append(specs,
			spec{"strict FIFO sharing (--share --vram)", simFIFO, c},
			spec{"FIFO sharing + backfill (gpuexec's rule)", simBackfill, c},
			spec{fmt.Sprintf("best list schedule found (offline, %d orders)", simTries+4), simList, c})
	}
	rows := make([]simRow, len(specs))
	for i, s := range specs {
		rows[i] = simRow{name: s.name, capMiB: s.cap, makespan: make([]time.Duration, len(arrivals))}
		for vi, arr := range arrivals {
			if !variants[vi] {
				continue
			}
			sj := simDay(jobs, arr, factor, killAfter)
			if s.p == simList {
				rows[i].makespan[vi] = bestListSchedule(sj, s.cap, simTries, 1)
			} else {
				rows[i].makespan[vi] = simulate(sj, s.cap, s.p, nil)
			}
		}
	}
	return rows
}
