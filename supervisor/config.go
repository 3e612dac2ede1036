package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/lock"
	"github.com/gpuexec/gpuexec/signals"
)

// Config is one job.
type Config struct {
	// Lock says which lock to hold and how to wait for it. With
	// Lock.Devices, the job takes the first Lock.Need free ones (in
	// arrival order among waiters) and its child gets
	// CUDA_VISIBLE_DEVICES and GPUEXEC_GPU naming them.
	Lock lock.Options
	// Backend takes the lock; nil means lock.Files. With a lock.Leased
	// backend (an etcd lock) the job cannot check or share this machine's
	// GPUs (VRAM, Share), and KillAfter is bounded by the lease (see
	// Validate).
	Backend lock.Backend
	// Wait is the longest time to queue for the lock; 0 tries once,
	// Forever waits as long as it takes.
	Wait time.Duration
	// Argv is the command and its arguments.
	Argv []string
	// Env is the child's environment before the EnvLock* variables are
	// added; nil means os.Environ().
	Env []string
	// Stdin, Stdout and Stderr are the child's; nil means gpuexec's own.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Timeout is the longest run of the child; 0 is none. With
	// KillAfter (unless Forever) it makes the lock's deadline
	// (lock.Options.HoldLimit), which waiters show, unless Lock.HoldLimit
	// is set; a sharer with one may start ahead of the queue (backfill:
	// lock.Options.Backfill).
	Timeout time.Duration
	// TimeoutSignal is the first signal the job's group gets at Timeout;
	// nil means SIGTERM. SIGKILL kills the job at once; any other is
	// followed by SIGKILL after KillAfter. On Unix every signal sent is
	// followed by SIGCONT, so that a stopped job acts on it. On Windows
	// the job gets CTRL_BREAK_EVENT whatever the signal, but for SIGKILL
	// (its Job Object is terminated at once). signals.Parse reads one as
	// users write it.
	TimeoutSignal os.Signal
	// KillAfter is the grace between the first signal to the group (at
	// Timeout, a forwarded one, the lock lost) and SIGKILL; 0 sends
	// SIGKILL with the first signal, Forever never sends it. With an
	// etcd lock it is under a third of the lease's ttl (see Validate).
	KillAfter time.Duration
	// ContinueOnLost lets the job finish when the lock is lost while it
	// runs; by default the job is stopped, so that two jobs never share
	// the GPU.
	ContinueOnLost bool
	// Signals are the signals that reach gpuexec (see package signals);
	// nil means none are handled.
	Signals <-chan os.Signal
	// Logger receives every log line; nil logs nothing.
	Logger hclog.Logger
	// NotFoundHint, when set, is asked for a hint when the command
	// Argv[0] is not found (status 127); what it returns, if not empty,
	// ends the error line ("stauts: command not found; did you mean
	// ..."). It changes nothing else.
	NotFoundHint func(command string) string
	// GPU is where facts about the cards come from (nvidia-smi); nil
	// reads none. With it, the job's peak video memory is sampled while
	// it runs (a second into the job, then every 2 s: a job that ends
	// sooner is not sampled) and is in the "job exited" line.
	GPU gpu.Source
	// VRAM is the free video memory the job needs before it starts; 0
	// checks none. The job starts once it holds the lock of a device
	// whose free memory (the smaller of two readings a moment apart) is
	// at least VRAM: with Lock.Devices the first such device in queue
	// order, else every device the job sees (CUDA_VISIBLE_DEVICES in
	// Env, or all). A job held up by memory keeps its place at the front
	// of the queue. Needs GPU.
	VRAM gpu.MiB
	// Share makes the job a sharer with VRAM as its budget: it may run
	// beside other sharers on a device while the sharers' budgets, the
	// memory in use by anything else and VRAM fit in the device's total
	// less Reserve (see lock.Options.ShareMiB for the queue and the lock
	// file). While it runs its processes are measured every 2 s; one
	// over its budget by more than a margin (5% of the budget, at least
	// 256 MiB) is named in the log and in status. Needs VRAM and GPU.
	Share bool
	// Reserve is the memory of each device that sharers leave free; 0
	// takes the default: 5% of the device's memory, at least 512 MiB.
	Reserve gpu.MiB
	// VRAMEnforce stops a sharer found over its budget as Timeout does
	// (TERM, KillAfter, KILL); gpuexec then exits ExitOverBudget.
	VRAMEnforce bool
	// Sentinel says that this program can be a job's terminal sentinel:
	// started with the one argument SentinelArg, its main runs
	// RunSentinel and nothing else (see IsSentinel). On Linux, when the
	// job has the terminal (stdin is one and gpuexec is in its
	// foreground), what the terminal sends the job's group (Ctrl+C,
	// Ctrl+\, a hangup) reaches the job alone; the sentinel, a small
	// process of this program in that group, tells gpuexec, which then
	// ends the job as it ends one it forwarded that signal to: SIGKILL
	// after KillAfter if the job still runs (the signal is not sent
	// again). Without it such a signal is the job's alone: a job that
	// ignores Ctrl+C keeps running. Elsewhere, and without a terminal,
	// it changes nothing and no sentinel is started.
	Sentinel bool
	// SoleJob says that this process starts no other children than the
	// job's (the gpuexec command; its own sentinel is ended with the
	// job's command): every process it is left with once the job's
	// command ends is then the job's, wherever it moved (a
	// daemon in a session of its own), and is stopped with the job
	// before the lock is released. Linux only, where gpuexec is the
	// subreaper of its job; a library that runs other children, or
	// several jobs at once, leaves it false.
	SoleJob bool
	// Ended, when set, is told how the job ended, once per Run that
	// queued for the lock, whatever the end (see Outcome), after the lock
	// is released: never on the way from one holder to the next. It is
	// not called for a Run that never queued: a Config that Validate
	// refuses, a command not found or not executable (found before
	// queueing), a nested run under a lock its parent holds (reentrant:
	// it takes no lock).
	Ended func(End)
	// IdleWarn, when not 0, logs one warning naming the job when it holds
	// a whole device (not Share) and its processes, as the peak sampler
	// reads them (Config.GPU), have used no video memory for that long:
	// the lock is held by something that does not use the GPU.
	// End.IdleWarned says it was given.
	IdleWarn time.Duration
}

func (cfg Config) backend() lock.Backend {
	if cfg.Backend == nil {
		return lock.Files
	}
	return cfg.Backend
}

// leased is the lease's ttl of a lock.Leased backend's lock, false for
// another backend's (lock files) or a lock its backend cannot read (its
// Check says why).
func (cfg Config) leased() (time.Duration, bool) {
	if b, ok := cfg.backend().(lock.Leased); ok {
		return b.LeaseTTL(cfg.Lock)
	}
	return 0, false
}

// machineLocal reports whether the locks of backend b (nil: lock.Files)
// are this machine's, which stand for its GPUs: those of every backend but
// a lock.Leased one, whose locks several machines share.
func machineLocal(b lock.Backend) bool {
	_, leased := b.(lock.Leased)
	return !leased
}

// ErrNoCommand is Validate's refusal of a Config whose Argv names no
// command.
var ErrNoCommand = errors.New("no command given: gpuexec [flags] -- COMMAND [ARG...]")

// Validate reports what is wrong with cfg, touching nothing: a command
// (ErrNoCommand), the lock's options as its backend checks them, and the
// job's durations (an
// *lock.OptionError naming wait, timeout or kill-after), KillAfter with
// a lock.Leased backend's lock among them: under a third of its lease's
// ttl, unless ContinueOnLost. Run refuses what Validate refuses (status
// ExitFailed, the error logged); a program calls it to refuse bad input
// before it starts.
func (cfg Config) Validate() error {
	if len(cfg.Argv) == 0 || cfg.Argv[0] == "" {
		return ErrNoCommand
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"wait", cfg.Wait}, {"timeout", cfg.Timeout}, {"kill-after", cfg.KillAfter}} {
		if d.v < 0 {
			return &lock.OptionError{Option: d.name, Problem: fmt.Sprintf("must not be negative, got %s", d.v)}
		}
	}
	if sig := cfg.TimeoutSignal; sig != nil && signals.Of(sig) != signals.End {
		return &lock.OptionError{Option: "signal", Problem: signals.Name(sig) + " does not end a job"}
	}
	if err := cfg.validateVRAM(); err != nil {
		return err
	}
	if err := cfg.backend().Check(cfg.Lock); err != nil {
		return err
	}
	return cfg.leaseGrace()
}

// leaseGrace checks KillAfter against the lease of a lock.Leased backend's
// lock (an etcd lock): a holder cut off from etcd declares the lock lost and stops the job two thirds of the
// ttl after its last renewal, and etcd may give the lock to the next
// waiter one ttl after it; so the job's SIGKILL must come before, with
// KillAfter under a third of the ttl (docs/etcd.md, "What the lock
// guarantees"). With ContinueOnLost the job is not stopped when the lock
// is lost, and the rule does not apply.
func (cfg Config) leaseGrace() error {
	if cfg.ContinueOnLost {
		return nil
	}
	lease, ok := cfg.leased()
	if !ok {
		return nil // lock files, or the backend's Check says why
	}
	limit := lease / 3
	ttl := fmt.Sprintf("ttl=%ds", lease/time.Second) // whole seconds
	switch {
	case cfg.KillAfter == Forever:
		return &lock.OptionError{Option: "kill-after", Problem: fmt.Sprintf(
			"never cannot be used with an etcd lock: a job whose lock is lost must be gone before the next holder may start, so it must be under %s (a third of the lock's %s)",
			limit, ttl)}
	case cfg.KillAfter >= limit:
		return &lock.OptionError{Option: "kill-after", Problem: fmt.Sprintf(
			"must be under %s with this etcd lock (a third of its %s), so that a job whose lock is lost is gone before the next holder may start; got %s",
			limit, ttl, cfg.KillAfter)}
	}
	return nil
}

// KillAfterFor is the grace a job gets when its user names none, with
// the lock o of backend b (nil: lock.Files): DefaultKillAfter, or with a
// lock.Leased backend's lock whose lease's ttl is under four times that, a
// quarter of the ttl, so that the default keeps the rule Validate checks
// (under a third of the ttl) with room to spare.
func KillAfterFor(b lock.Backend, o lock.Options) time.Duration {
	lease, ok := Config{Backend: b, Lock: o}.leased()
	if !ok || lease/4 >= DefaultKillAfter {
		return DefaultKillAfter
	}
	return lease / 4
}
