// Package signals is gpuexec's signal policy: which signals it catches, and
// what status it exits with when one ends it.
//
// Caught signals are forwarded to the child's whole process group while a
// job runs (unless the job has the terminal, its own group does not hear
// the terminal's Ctrl+C, so forwarding is the only way it does), and end a
// wait for the lock with
// 128+N; on Unix, a stop (SIGTSTP, Ctrl+Z) and a continue (SIGCONT) are
// not endings: the job stops and goes on with gpuexec (see Of). Others are
// left to the Go runtime's defaults; SIGCHLD and SIGURG (the runtime's
// preemption signal) in particular are never caught or forwarded. SIGPIPE
// is never allowed to end gpuexec (see SurviveBrokenPipes). A signal that
// was ignored when the program started (nohup's SIGHUP, the SIGINT of a
// command a script runs in the background) is not caught: it stays
// ignored, for gpuexec and for the job, which inherits it (see Caught).
package signals

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Caught are the signals gpuexec handles itself (see the per-OS list,
// catchable), less those that were ignored when the program started
// (signal.Ignored, read once as the package is initialised, before any
// Notify can change it): as nohup(1), shells and timeout(1) expect, such
// a signal stays ignored, so that it neither ends gpuexec nor reaches the
// job, which inherits it ignored across exec. Only SIGHUP and SIGINT can
// be told: the Go runtime replaces any other inherited SIG_IGN (SIGQUIT's,
// SIGPIPE's) with its own handler before the program runs, so those are
// caught whatever the program inherited. The caller may change the slice
// returned.
func Caught() []os.Signal { return slices.Clone(caught) }

// caught is Caught, computed once at start.
var caught = notIgnored(catchable)

// notIgnored is sigs without the signals ignored at the moment.
func notIgnored(sigs []os.Signal) []os.Signal {
	var out []os.Signal
	for _, s := range sigs {
		if !signal.Ignored(s) {
			out = append(out, s)
		}
	}
	return out
}

// Notify starts delivering the caught signals to the returned channel, which
// is buffered so that a burst is not lost while gpuexec is busy. stop
// restores the default handling.
func Notify() (c <-chan os.Signal, stop func()) {
	ch := make(chan os.Signal, 16)
	notify(ch, caught)
	return ch, func() { signal.Stop(ch) }
}

// notify is signal.Notify for sigs, which never means every signal: an
// empty sigs registers nothing.
func notify(ch chan<- os.Signal, sigs []os.Signal) {
	if len(sigs) > 0 {
		signal.Notify(ch, sigs...)
	}
}

// Action is what a caught signal asks of gpuexec and its job.
type Action int

const (
	// End: stop the job (forward the signal, SIGKILL after the grace)
	// and end with 128+N; while waiting, stop waiting.
	End Action = iota
	// Stop: stop the job's group with gpuexec, as a shell's Ctrl+Z
	// stops a job (Unix only).
	Stop
	// Continue: let the job's group go on with gpuexec (Unix only).
	Continue
)

// Of says what sig asks.
func Of(sig os.Signal) Action {
	switch sig {
	case stopSignal:
		return Stop
	case continueSignal:
		return Continue
	}
	return End
}

// ExitStatus is the status gpuexec exits with when sig ends it: 128+N, as a
// shell reports a process killed by signal N (130 for SIGINT, 143 for
// SIGTERM).
func ExitStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 128 + int(syscall.SIGTERM)
}

// Name is the signal's conventional name ("SIGINT").
func Name(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if n, ok := names[s]; ok {
			return n
		}
		if n := systemName(s); n != "" {
			return n
		}
	}
	return sig.String()
}

// Parse reads a signal as a user writes it (gpuexec's --signal): a name,
// with or without its SIG prefix and in any case (TERM, sigterm, INT, HUP,
// KILL, USR1), or its number (15). It accepts only signals that end a job
// where gpuexec runs: on Unix any signal but the job-control ones (STOP,
// TSTP, TTIN, TTOU, CONT: gpuexec follows every signal it sends with
// SIGCONT, which would undo them); on Windows TERM and INT (both become
// CTRL_BREAK_EVENT to the job's console group, the only event a group
// can get) and KILL (the Job Object is terminated). Anything else is an
// error of one line, saying what is accepted.
func Parse(s string) (os.Signal, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	var sig syscall.Signal
	if n, err := strconv.Atoi(name); err == nil {
		sig = byNumber(n)
	} else {
		sig = byName(strings.TrimPrefix(name, "SIG"))
	}
	if sig == 0 {
		return nil, fmt.Errorf("%q is not a signal; use %s", s, accepted)
	}
	if !endsJob(sig) {
		return nil, fmt.Errorf("%s does not end a job; use %s", Name(sig), accepted)
	}
	return sig, nil
}

// Ending is parent, done as soon as a signal arrives that ends gpuexec (Of
// says End): for the work gpuexec does before it catches signals for a job
// (running nvidia-smi to check --gpus and --vram), which such a signal
// must stop, not leave running behind a gpuexec that the signal's default
// action ended. A stop or continue signal is left to its default. stop
// ends the watch and returns the signal that came, nil if none; it may be
// called more than once. To lose no signal, register Notify before stop:
// one that comes after stop is Notify's alone.
func Ending(parent context.Context) (ctx context.Context, stop func() os.Signal) {
	ctx, cancel := context.WithCancel(parent)
	var ending []os.Signal
	for _, s := range caught {
		if Of(s) == End {
			ending = append(ending, s)
		}
	}
	ch := make(chan os.Signal, 1)
	notify(ch, ending)
	var got os.Signal
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case got = <-ch:
			cancel()
		case <-ctx.Done():
		}
	}()
	var once sync.Once
	return ctx, func() os.Signal {
		once.Do(func() {
			cancel()
			<-done
			if got == nil {
				select {
				case got = <-ch:
				default:
				}
			}
			// Stop waits for the runtime's signal thread (about
			// half a millisecond): in the background, as Notify's
			// stop is. A signal meanwhile is Notify's, whose
			// channel a caller has registered before it stops this.
			go signal.Stop(ch)
		})
		return got
	}
}
