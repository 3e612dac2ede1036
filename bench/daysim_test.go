//go:build linux

package main

import (
	"slices"
	"testing"
	"time"
)

func TestSimulate(t *testing.T) {
	s := time.Second
	// job: budget, duration, arrival, timeout (0: none).
	job := func(mib int64, dur, arrive, timeout time.Duration) simJob {
		return simJob{mib: mib, dur: dur, arrive: arrive, timeout: timeout}
	}
	// A holds 6 of 10 for 10 s; B (6, 1 s) is the head behind it; C
	// (4, 10 s) fits beside A now.
	abc := func(aTimeout, cTimeout time.Duration) []simJob {
		return []simJob{job(6, 10*s, 0, aTimeout), job(6, s, 0, s), job(4, 10*s, 0, cTimeout)}
	}
	// A holds 5 of 10; B needs all 10; nine waiters of 6 (never beside
	// A) and then one of 1 that fits now but would pass ten.
	passTen := func() []simJob {
		jobs := []simJob{job(5, 10*s, 0, 10*s), job(10, s, 0, s)}
		for range 8 {
			jobs = append(jobs, job(6, s, 0, s))
		}
		return append(jobs, job(1, s, 0, s))
	}
	passEight := func() []simJob {
		jobs := passTen()
		return slices.Delete(jobs, 2, 3) // the last one passes the head and 7: 8 waiters
	}
	cases := []struct {
		name     string
		jobs     []simJob
		p        simPolicy
		order    []int
		makespan time.Duration
		starts   []time.Duration // nil: not checked
	}{
		{"serial, one after another", []simJob{job(1, s, 0, 0), job(1, 2*s, 0, 0)}, simSerial, nil, 3 * s, []time.Duration{0, s}},
		{"serial, idle until an arrival", []simJob{job(1, s, 0, 0), job(1, s, 5*s, 0)}, simSerial, nil, 6 * s, []time.Duration{0, 5 * s}},
		{"serial, arrival order not index order", []simJob{job(1, s, 2*s, 0), job(1, s, 0, 0)}, simSerial, nil, 3 * s, []time.Duration{2 * s, 0}},
		{"fifo: C waits behind B though it fits", abc(10*s, 10*s), simFIFO, nil, 20 * s, []time.Duration{0, 10 * s, 10 * s}},
		{"fifo: budgets that fit together start together", []simJob{job(5, s, 0, 0), job(5, 2*s, 0, 0)}, simFIFO, nil, 2 * s, []time.Duration{0, 0}},
		{"backfill: C ends by the head's start", abc(10*s, 10*s), simBackfill, nil, 11 * s, []time.Duration{0, 10 * s, 0}},
		{"backfill: C would end after the head's start", abc(10*s, 10*s+time.Millisecond), simBackfill, nil, 20 * s, []time.Duration{0, 10 * s, 10 * s}},
		{"backfill: a holder without a deadline", abc(0, s), simBackfill, nil, 20 * s, []time.Duration{0, 10 * s, 10 * s}},
		{"backfill: C without a timeout never backfills", abc(10*s, 0), simBackfill, nil, 20 * s, []time.Duration{0, 10 * s, 10 * s}},
		{"backfill: at most 8 passed", passTen(), simBackfill, nil, -2, nil},
		{"backfill: 8 passed", passEight(), simBackfill, nil, -2, nil},
		{"list: anyone who fits starts", abc(0, 0), simList, []int{0, 1, 2}, 11 * s, []time.Duration{0, 10 * s, 0}},
		{"list: the order given is the priority", []simJob{job(6, s, 0, 0), job(6, 3*s, 0, 0)}, simList, []int{1, 0}, 4 * s, []time.Duration{3 * s, 0}},
		{"a job larger than the card", []simJob{job(11, s, 0, 0)}, simFIFO, nil, -1, nil},
		{"no jobs", nil, simFIFO, nil, 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, starts := simStarts(tc.jobs, 10, tc.p, tc.order)
			switch tc.name {
			case "backfill: at most 8 passed":
				// The 1-MiB job is the 11th: it would pass 9 waiters.
				if last := starts[len(starts)-1]; last == 0 {
					t.Fatalf("the job 9 behind the head started at once; starts %v", starts)
				}
				return
			case "backfill: 8 passed":
				if last := starts[len(starts)-1]; last != 0 {
					t.Fatalf("the job 8 behind the head (the head counted) started at %v, want 0; starts %v", last, starts)
				}
				return
			}
			if m != tc.makespan {
				t.Errorf("makespan %v, want %v", m, tc.makespan)
			}
			if tc.starts != nil && !slices.Equal(starts, tc.starts) {
				t.Errorf("starts %v, want %v", starts, tc.starts)
			}
		})
	}
}

// The day itself: every policy's makespan is at least the bound, serial is
// the sum of the durations, and the best list schedule is no worse than
// the list schedule in arrival order.
func TestSimulateDay(t *testing.T) {
	jobs := dayJobs(100)
	cap := int64(fakeSharableMiB)
	lb := lowerBound(jobs, cap)
	var sum time.Duration
	for _, j := range jobs {
		sum += j.dur
	}
	for _, arr := range [][]arrival{fixedArrivals(len(jobs), 1, 20*time.Millisecond), randomArrivals(len(jobs), 1, lb/2)} {
		sj := simDay(jobs, arr, 1.2, 50*time.Millisecond)
		serial := simulate(sj, cap, simSerial, nil)
		fifo := simulate(sj, cap, simFIFO, nil)
		backfill := simulate(sj, cap, simBackfill, nil)
		best := bestListSchedule(sj, cap, 200, 1)
		t.Logf("lower bound %v: serial %v, fifo %v, backfill %v, best list %v", lb, serial, fifo, backfill, best)
		for name, m := range map[string]time.Duration{"serial": serial, "fifo": fifo, "backfill": backfill, "best": best} {
			if m < lb {
				t.Errorf("%s: %v, under the lower bound %v", name, m, lb)
			}
		}
		if arr[len(arr)-1].at < jobs[0].dur && serial != sum {
			t.Errorf("serial %v, want the sum of the durations %v", serial, sum)
		}
		if list := simulate(sj, cap, simList, nil); best > list {
			t.Errorf("best list schedule %v, longer than the one in arrival order %v (among those tried)", best, list)
		}
	}
}
