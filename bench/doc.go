// Command bench measures gpuexec side by side with flock(1) and the seed's
// polling lock (the Node re-creation in lock/testdata/seedlock.cjs), in one
// run, and prints a Markdown table for the README. It is Linux only: it reads
// /proc and runs flock(1).
//
// Run it from the module root:
//
//	go run ./bench [flags]
//
// It builds gpuexec from the working tree first (go build -o TMP/gpuexec .,
// with -tags and -ldflags passed through), so it always measures the current
// code; -gpuexec PATH measures a prebuilt binary instead. Everything happens
// in a fresh temporary folder that is removed at the end (-keep keeps it);
// the default GPU lock is never touched. Progress goes to stderr, the table to
// stdout.
//
// Measurements (-only picks a subset, e.g. -only a,b,f):
//
//	a  wrapper overhead: `gpuexec --lock L -- true` against `flock L true`
//	   (and the seed's run mode holding 0 ms), uncontended, -runs runs each,
//	   interleaved run by run; min, median, p90 and the ratio of medians to
//	   flock's.
//	b  handoff gap: -contenders loop processes, each running the wrapper
//	   around a critical section -cycles times. The critical section is this
//	   program re-executed (BENCH_ROLE=critical): it notes the time at its
//	   start and end, holds -hold, and proves exclusivity with a
//	   non-blocking flock on a truth file. Gap = a section's start minus the
//	   previous section's end, counted where the next wrapper had been
//	   started before the previous section began (a waiter was queued);
//	   p50, p90, p99, max.
//	c  overlapping critical sections in b and f (must be 0).
//	d  CPU used by one waiter queued for -wait-cpu behind a holder
//	   (utime+stime from /proc/PID/stat, startup excluded).
//	e  VmRSS and VmHWM of the wrapper process while its child runs.
//	f  FIFO: -fifo-waiters waiters queued one after another behind a
//	   holder (each started once the previous is visibly queued), then the
//	   holder releases; is the order in which their sections run the arrival
//	   order? -fifo-rounds rounds.
//
// The seed polls: its handoff gap scales with its poll interval (20 s in the
// article). It runs with SEEDLOCK_POLL_MS = -seed-poll (default 20 s, the
// seed's own) for d, and -seed-handoff-poll (default 500 ms) for b and f; the
// table says which.
//
// -quick is a smoke test: 10 runs, 2 contenders x 3 cycles, 2 s of waiting,
// 2 FIFO rounds (flags given explicitly still win).
package main
