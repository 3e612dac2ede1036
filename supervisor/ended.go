package supervisor

import (
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu"
)

// Outcome is how a job that queued ended (End.Outcome). The values are
// the job journal's words for them.
type Outcome string

// The outcomes: every job that queued ends with exactly one.
const (
	// OK: the command ran and exited 0.
	OK Outcome = "ok"
	// Failed: the command ran and exited non-zero, or was killed by a
	// signal gpuexec did not send it, or could not be started once the
	// lock was held (End.Status says which).
	Failed Outcome = "failed"
	// Timeout: the command was stopped at Config.Timeout.
	Timeout Outcome = "timeout"
	// Deferred: the wait for the lock (Config.Wait) ran out, or with no
	// wait the lock was held or the memory short: the job did not run.
	Deferred Outcome = "deferred"
	// Interrupted: a signal to gpuexec ended the job while it waited (it
	// did not run), as it took the lock (it did not start), or while it
	// ran (forwarded to it, or sent it by the terminal); End.Signal names
	// it. Also a Run whose context ended.
	Interrupted Outcome = "interrupted"
	// Lost: the lock was lost while the job ran, and the job was stopped.
	Lost Outcome = "lost"
	// OverBudget: a sharer over its budget was stopped (VRAMEnforce).
	OverBudget Outcome = "overbudget"
	// Refused: the lock could not be used (a lock file refused, a folder
	// it may not write, an etcd cluster out of reach): the job did not run.
	Refused Outcome = "refused"
)

// End is how one job that queued ended: what Config.Ended is told.
type End struct {
	Outcome Outcome
	// Status is Run's exit status.
	Status int
	// Signal names the signal that ended an Interrupted job ("" for a
	// Run whose context ended).
	Signal string
	// Queued is when the job began to queue; Started when it took the
	// lock (zero if it never did); Ended when it let the lock go, or gave
	// up (the moment before Config.Ended is called).
	Queued, Started, Ended time.Time
	// Devices are the devices the job held (Lock.Devices), none without.
	Devices []string
	// Sampled says that the job's video memory was measured while it ran
	// (Config.GPU, a job that ran past the first sample, a driver that
	// reports per-process memory); then Peak is the most its processes
	// used at once, and Unused how long, as sampled, they used none.
	Sampled bool
	Peak    gpu.MiB
	Unused  time.Duration
	// IdleWarned says that the job was warned of for holding a whole card
	// unused for Config.IdleWarn.
	IdleWarned bool
}

// ended tells Config.Ended how the job ended, if it is set.
func (cfg Config) ended(e End) {
	if cfg.Ended == nil {
		return
	}
	e.Ended = time.Now()
	cfg.Ended(e)
}

// devicesOf are the devices the lock h holds, if it says.
func devicesOf(h jobLock) []string {
	if d, ok := h.(interface{ Devices() []string }); ok {
		return d.Devices()
	}
	return nil
}
