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
// Measurements (-only picks a subset of a-i, e.g. -only a,b,f; a-h by
// default, i only when named):
//
//	a  wrapper overhead: `gpuexec --lock L -- true` against `flock L true`
//	   (and the seed's run mode holding 0 ms), uncontended, -runs runs each,
//	   interleaved run by run; min, median, p90 and the ratio of medians to
//	   flock's; and against two Go floors (bench/floor), run interleaved
//	   with them: `floor true`, a Go program linking gpuexec's libraries
//	   that only runs true (target: gpuexec's median <= 1.25x its), and
//	   `floor -lock L true`, which also catches gpuexec's signals and takes
//	   and gives back the lock with the core of gpuexec's file operations.
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
//	g  pre-queued handoff chain (lockbench-style, no wrapper start-up in
//	   the way): a holder takes the lock, then -chain-waiters (16)
//	   wrappers around the critical section of b, holding -chain-hold
//	   (150ms), are started at once. Once all are seen queued, and 500 ms
//	   more for them to finish starting up, the holder releases. Queued
//	   means: for gpuexec, as many tickets <lock>.ticket-* beside the lock
//	   as waiters (the holder took the free lock without one; the folder
//	   is only listed, which wakes no watch); for flock(1), every waiter
//	   listed as blocked in flock(2) in /proc/locks (no sleeping blindly);
//	   for the seed, each printed its first "waiting" line. Gap = a
//	   section's start minus the previous one's end, sorted by start (the
//	   first, after the holder, not counted); -chain-rounds (3) rounds
//	   pooled, the contenders taking turns; p50 and p90 with their ratio
//	   to flock's (targets: p50 <= 1.5x, p90 <= 2x), and overlaps (must
//	   be 0).
//	h  total CPU of N waiters queued behind a holder, for each N of
//	   -cpu-waiters (1,10,100), all contenders at once, each on its own
//	   lock: once all are seen queued (as in g, with a deadline of a
//	   minute plus a second per waiter, then an error) and 500 ms more,
//	   the sum of their utime+stime (/proc/PID/stat) is read, and again
//	   -wait-cpu later; shown as % of a core (target: < 1% at 100 for
//	   gpuexec). Then the holder releases and every waiter must exit 0;
//	   they are killed on any failure. The seed's waiters are stopped
//	   with SIGTERM instead (at its 20 s poll they would drain one poll
//	   each), and the seed is skipped above 10 waiters (each a polling
//	   node process).
//	i  a day of jobs on a fake 24 GiB card (issue #28): the seed's mix, 20
//	   TTS jobs of 2 GiB x 30 s, 10 image jobs of 6 GiB x 60 s and 4
//	   renders of 9 GiB x 180 s, times divided by -day-scale (100: 0.3 s,
//	   0.6 s, 1.8 s). Each job is this program re-executed
//	   (BENCH_ROLE=gpujob): it notes its start, registers the memory it
//	   uses under its pid in a registry folder (atomically: a temporary
//	   file renamed), growing linearly from 0 to its peak over the first
//	   tenth of its run, holds the peak, notes its end, unregisters and
//	   exits 0. The card is a fake nvidia-smi: this program again, started
//	   through a link named nvidia-smi (given to gpuexec with
//	   --nvidia-smi), answering gpuexec's two queries in a real driver's
//	   shape for one RTX 4090 (24564 MiB, 342 MiB reserved, MIG Disabled)
//	   whose used memory is what the registry's live pids use; `gpuexec
//	   status` must show it before anything runs. Arrivals, both in one
//	   run (-day-arrivals): a seeded shuffled order, one job every -day-gap
//	   (20ms); and random arrivals, uniform over the first half of the
//	   lower bound (-day-seed, default 1). Policies, one after another,
//	   each on a fresh lock folder and card (-day-policies): flock(1)
//	   (`flock L JOB`), gpuexec whole card (`gpuexec --lock L --owner
//	   bench --slug CLASS-N --nvidia-smi FAKE -- JOB`), gpuexec --share
//	   --vram SIZE (the class's peak), and share + timeout (backfill):
//	   also --timeout (the job's duration x -day-timeout-factor, 1.2) and
//	   --kill-after -day-kill-after (50ms). Every job must exit 0. A
//	   sampler reads the registry every -day-sample (5ms). Per policy and
//	   arrivals: makespan (first arrival to last end), its ratio to the
//	   lower bound max(sum of peak x duration / usable, longest job), with
//	   usable = total - reserved, memory-time utilisation, each class's
//	   wait (its start minus its arrival) p50 and max, the shortest wait,
//	   samples whose sum exceeds usable (must be 0) with the peak sum, and
//	   for flock(1) and whole card samples with more than one job (must
//	   be 0). -day-chart FILE writes an SVG bar chart of the makespans,
//	   the lower bound as a dashed line. About 2 minutes at -day-scale 100.
//
// The seed polls: its handoff gap scales with its poll interval (20 s in the
// article). It runs with SEEDLOCK_POLL_MS = -seed-poll (default 20 s, the
// seed's own) for d and h, and -seed-handoff-poll (default 500 ms) for b, f
// and g; the table says which.
//
// -quick is a smoke test: 10 runs, 2 contenders x 3 cycles, 2 s of waiting,
// 2 FIFO rounds, a chain of 4 waiters holding 50 ms in 1 round, 1 and 10
// waiters for h (flags given explicitly still win).
package main
