package supervisor

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/lock"
	"github.com/gpuexec/gpuexec/signals"
)

// watch is the select loop over child exit, signals, timeout and lock loss.
type watch struct {
	cfg   Config
	grp   *group
	term  *terminal
	log   hclog.Logger
	lostC <-chan struct{}
	// overC reports a sharer's job over its budget (budgetCheck).
	overC <-chan gpu.MiB

	termSent  bool
	killAt    time.Time
	killTimer *time.Timer
	killed    bool
	timedOut  bool
	lostStop  bool
	overStop  bool
	// signal is the first signal that ended the job: forwarded to it, or
	// sent it by the terminal; ctxEnded says Run's context ended it.
	signal   os.Signal
	ctxEnded bool
}

// stop sends sig (the graceful stop) to the group and arms the kill timer
// once.
func (w *watch) stop(sig os.Signal) {
	if err := w.grp.signal(sig); err != nil {
		w.log.Debug("signalling the job's group", "signal", signals.Name(sig), "error", err)
	}
	// A stopped job (Ctrl+Z, SIGSTOP) acts on the signal only once it
	// runs again: continue it, as timeout(1) does.
	w.grp.resume()
	w.arm()
}

// arm arms the kill timer, once: the group has had its graceful stop.
func (w *watch) arm() {
	if w.termSent {
		return
	}
	w.termSent = true
	if w.cfg.KillAfter == Forever {
		return // no SIGKILL: the first signal alone
	}
	w.armAfter(w.cfg.KillAfter)
}

// armAfter arms the kill timer to fire after d, unless it is armed.
func (w *watch) armAfter(d time.Duration) {
	if w.killTimer != nil {
		return
	}
	w.killAt = time.Now().Add(d)
	w.killTimer = time.NewTimer(d)
}

// stopWithJob stops gpuexec with its stopped job, as a shell's job stops,
// until it is continued: the sentinel too (or it would be the one process
// of the job's group that runs), and the terminal goes back to gpuexec's
// group first, so that the shell gets it.
func (w *watch) stopWithJob() {
	w.term.pauseSentinel()
	w.term.giveBack()
	lock.Suspend(stopSelf)
}

// fromTerminal handles sig, which the job's group got from the terminal
// (see terminal.heard): the job has it already, so it is not sent again,
// but it ends the job as a forwarded one does, with SIGKILL after the
// grace if the job still runs. After the group's graceful stop, it is that
// stop's own signal, or one more that changes nothing.
func (w *watch) fromTerminal(sig os.Signal) {
	if w.termSent {
		w.log.Debug("the job's process group got a signal", "signal", signals.Name(sig))
		return
	}
	w.log.Warn("the job's process group got a signal from the terminal", "signal", signals.Name(sig))
	if w.signal == nil {
		w.signal = sig
	}
	w.arm()
}

func (w *watch) kill() {
	if w.killed {
		return
	}
	w.killed = true
	if err := w.grp.kill(); err != nil {
		w.log.Debug("killing the job's group", "error", err)
	}
}

func (w *watch) run(ctx context.Context, done <-chan waited) waited {
	var timeout <-chan time.Time
	if w.cfg.Timeout > 0 {
		t := time.NewTimer(w.cfg.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	lost := w.lostC
	ctxDone := ctx.Done()
	listening := w.term.listening()
	for {
		var killC <-chan time.Time
		if w.killTimer != nil && !w.killed {
			killC = w.killTimer.C
		}
		// The job's own end goes first: a job that ended while gpuexec
		// was stopped reports its own status, whatever else is ready.
		select {
		case r := <-done:
			return r
		default:
		}
		select {
		case r := <-done:
			return r
		case <-w.term.stopped():
			if w.term.jobStopped() {
				// Ctrl+Z reached the job, which has the terminal:
				// stop with it, so that the shell sees its job
				// stopped and gets the terminal back.
				w.log.Info("job stopped; stopping with it until continued (fg, bg)")
				w.stopWithJob()
			}
		case sig := <-w.term.heard():
			w.fromTerminal(sig)
		case <-listening:
			listening = nil
			w.log.Debug("watching what the terminal sends the job's process group (Ctrl+C, Ctrl+\\, hangup)")
		case sig := <-w.cfg.Signals:
			switch signals.Of(sig) {
			case signals.Stop:
				w.log.Info("stopping the job's process group with gpuexec until continued", "signal", signals.Name(sig))
				if err := w.grp.signal(sig); err != nil {
					w.log.Debug("signalling the job's group", "signal", signals.Name(sig), "error", err)
				}
				w.stopWithJob()
				continue
			case signals.Continue:
				w.log.Debug("continuing the job's process group", "signal", signals.Name(sig))
				w.term.handOver()
				w.grp.resume()
				continue
			}
			w.log.Warn("forwarding signal to the job's process group", "signal", signals.Name(sig))
			if w.signal == nil {
				w.signal = sig
			}
			w.stop(sig)
		case used := <-w.overC:
			w.overC = nil
			if !w.cfg.VRAMEnforce {
				continue
			}
			w.overStop = true
			w.log.Error("job is over its video memory budget; stopping it (--vram-enforce)", "used_mib", int64(used), "budget_mib", int64(w.cfg.VRAM))
			w.stop(terminate)
		case <-timeout:
			timeout = nil
			w.timedOut = true
			sig := w.cfg.TimeoutSignal
			if sig == nil {
				sig = terminate
			}
			w.log.Error("job reached --timeout; stopping it", "timeout", w.cfg.Timeout.String(), "signal", signals.Name(sig))
			if sig == syscall.SIGKILL {
				w.termSent = true
				w.kill()
				continue
			}
			w.stop(sig)
		case <-lost:
			lost = nil
			if w.cfg.ContinueOnLost {
				w.log.Error("GPU lock lost while the job runs; letting it finish (--on-lost continue): another job may share the GPU")
				continue
			}
			w.lostStop = true
			w.log.Error("GPU lock lost while the job runs; stopping the job so that two jobs never share the GPU")
			w.stop(terminate)
			// --kill-after never is the job's own ending; the next
			// holder's card is not: SIGKILL after the default grace.
			w.armAfter(DefaultKillAfter)
		case <-ctxDone:
			ctxDone = nil
			w.ctxEnded = true
			w.log.Warn("stopping the job", "reason", ctx.Err())
			w.stop(terminate)
		case <-killC:
			w.log.Warn("job still running after the grace period; killing its process group", "kill-after", w.cfg.KillAfter.String())
			w.kill()
		}
	}
}

// outputDrainWait bounds how long the child's output is still copied after
// it exited (only when Stdout or Stderr is not a file).
const outputDrainWait = time.Second

// drainPoll is how often drain checks whether the group is empty.
const drainPoll = 10 * time.Millisecond

// drainKillWait bounds the wait for a killed group to disappear (processes
// stuck in uninterruptible sleep, zombies nobody reaps).
const drainKillWait = 5 * time.Second

// drain makes sure nothing of the job outlives it: processes the child left
// behind, in its group or outside it (daemons that moved to a session of
// their own, where the OS lets gpuexec find them), get SIGTERM (unless they
// already had it), SIGKILL after the grace period, and are waited for,
// before the lock is released.
func (w *watch) drain() {
	w.grp.reap()
	if !w.grp.alive() {
		return
	}
	// After the job's SIGKILL (--kill-after, a lost lock) what is still
	// there is its processes on their way out, which a loaded machine
	// takes a moment to finish: not processes it left behind. The loop
	// below kills and waits for them all the same.
	if !w.killed {
		w.log.Warn("the job's command exited but left processes behind; stopping them", "left", w.grp.describeLeft())
	}
	if !w.termSent {
		w.stop(terminate)
	}
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	var giveUp time.Time
	for {
		w.grp.reap()
		if !w.grp.alive() {
			return
		}
		now := time.Now()
		if !w.killed {
			// Processes that appeared since (a daemon forking) get
			// the graceful stop too.
			w.grp.stopStrays(terminate)
		}
		if !w.killed && w.killTimer != nil && !now.Before(w.killAt) {
			w.log.Warn("processes left by the job still run after the grace period; killing them", "left", w.grp.describeLeft())
			w.kill()
			giveUp = now.Add(drainKillWait)
		}
		if w.killed {
			w.grp.kill() // and any that appeared since
			if giveUp.IsZero() {
				giveUp = now.Add(drainKillWait)
			}
		}
		if w.killed && now.After(giveUp) {
			w.log.Error("processes left by the job did not go away after SIGKILL; releasing the lock anyway", "left", w.grp.describeLeft())
			return
		}
		select {
		case <-tick.C:
		case sig := <-w.cfg.Signals:
			// A signal that ends gpuexec ends the wait for what the
			// job left (with --kill-after never, the only end of it).
			if signals.Of(sig) == signals.End && !w.killed {
				w.log.Warn("killing the processes left by the job", "signal", signals.Name(sig), "left", w.grp.describeLeft())
				w.kill()
				giveUp = time.Now().Add(drainKillWait)
			}
		}
	}
}

// describe says how the child ended, for the log.
func describe(r waited) string {
	if r.state == nil {
		return fmt.Sprint(r.err)
	}
	return r.state.String()
}
