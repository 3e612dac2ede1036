// Package supervisor runs one job under the GPU lock: it queues for the lock,
// starts the command in its own process group (Unix) or Job Object
// (Windows), forwards signals to the whole group, enforces the timeout,
// stops the group when the lock is lost, and releases the lock on every way
// out, after the job is confirmed gone.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/cmdline"
	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/lock"
	"github.com/gpuexec/gpuexec/signals"
)

// Exit statuses of gpuexec's own making. Every other status is the child's
// (its exit code, or 128+N when signal N killed it).
const (
	ExitDeferred   = 75  // gave up waiting for the lock: the job is deferred
	ExitTimeout    = 124 // the child was stopped at --timeout
	ExitFailed     = 125 // gpuexec itself failed
	ExitCannotExec = 126 // COMMAND found but not executable
	ExitNotFound   = 127 // COMMAND not found
)

// DefaultKillAfter is the grace period between SIGTERM and SIGKILL. Long
// enough for a render to flush a partial file and free the GPU cleanly;
// short enough that a hung job does not hold the card long after it was
// told to stop.
const DefaultKillAfter = 10 * time.Second

// Forever, as Config.Wait, waits for the lock as long as it takes (no
// deadline; a signal still ends the wait); as Config.KillAfter, sends no
// SIGKILL: the first signal alone, and a job that ignores it runs, holding
// the lock, until it exits. It is the longest time.Duration.
const Forever = time.Duration(math.MaxInt64)

// Environment variables set for the child. None of them is one of
// gpuexec's own GPUEXEC_<FLAG> variables: a gpuexec run inside the job
// reads its flags from what the user set, never from what its parent
// passed down.
const (
	EnvLockHeld  = "GPUEXEC_LOCK_HELD"  // "1"
	EnvLockPath  = "GPUEXEC_LOCK_PATH"  // the held lock's absolute path, or its etcd:// URL; with devices, the queue's path
	EnvLockToken = "GPUEXEC_LOCK_TOKEN" // the held lock's token; with devices, one per device in GPUEXEC_GPU's order
)

// Run runs the job and returns gpuexec's exit status. Failures are logged.
func Run(ctx context.Context, cfg Config) int {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	log := cfg.Logger
	enforced := holdLimit(cfg) // what the job's timeout and kill-after enforce
	if cfg.Lock.HoldLimit == 0 {
		cfg.Lock.HoldLimit = enforced
	}
	if err := cfg.Validate(); err != nil {
		log.Error(err.Error())
		return ExitFailed
	}
	path, code, err := findCommand(cfg.Argv[0])
	if err != nil {
		msg := err.Error()
		if code == ExitNotFound && cfg.NotFoundHint != nil {
			if hint := cfg.NotFoundHint(cfg.Argv[0]); hint != "" {
				msg += "; " + hint
			}
		}
		log.Error(msg)
		return code
	}

	st := newStarter()
	defer st.close()
	var end End // what cfg.Ended is told, once the lock is released
	held, who, reentrant := nested(cfg)
	if reentrant {
		log.Info("the GPU lock is already held for this job by "+who+"; running the command at once (reentrant)",
			"path", cfg.Lock.Path)
	} else {
		switch {
		case cfg.Share:
			cfg.Lock.ShareMiB = int64(cfg.VRAM)
			cfg.Lock.ShareReserve = int64(max(cfg.Reserve, 0))
			cfg.Lock.AdmitShare = newGate(cfg).admitShared
			// A sharer whose job is stopped by a known time may
			// start ahead of the queue when it ends before the head
			// could start (see docs/gpu.md, "Backfill").
			// (Not when the caller set a HoldLimit shorter than what
			// is enforced: the sidecar's deadline would be a lie.)
			cfg.Lock.Backfill = enforced > 0 && cfg.Lock.HoldLimit >= enforced
		case cfg.VRAM > 0:
			cfg.Lock.Admit = newGate(cfg).admit
		}
		end.Queued = time.Now()
		var why queueEnd
		if held, code, why = acquire(ctx, cfg); held == nil {
			end.Outcome, end.Status, end.Signal = why.outcome, code, why.signal
			cfg.ended(end)
			return code
		}
		end.Started = time.Now()
		end.Devices = devicesOf(held)
	}
	// A signal that arrived as the lock was taken ends the job before it
	// starts.
	for pending := true; pending; {
		select {
		case sig := <-cfg.Signals:
			if waitingSignal(sig, log) {
				continue
			}
			log.Warn("interrupted before the job started", "signal", signals.Name(sig))
			releaseLogged(held, log)
			if !reentrant {
				end.Outcome, end.Status, end.Signal = Interrupted, signals.ExitStatus(sig), signals.Name(sig)
				cfg.ended(end)
			}
			return signals.ExitStatus(sig)
		default:
			pending = false
		}
	}

	code, how := supervise(ctx, cfg, path, held, st)
	releaseLogged(held, log)
	if !reentrant {
		how.fill(&end, code)
		cfg.ended(end)
	}
	return code
}

// queueEnd is how a wait for the lock that got none ended.
type queueEnd struct {
	outcome Outcome
	signal  string // the signal's name, for Interrupted
}

// acquire queues for the lock, returning it, or nil, the exit status and
// why.
func acquire(ctx context.Context, cfg Config) (jobLock, int, queueEnd) {
	log := cfg.Logger
	var wctx context.Context
	var cancel context.CancelFunc
	if cfg.Wait > 0 && cfg.Wait != Forever {
		wctx, cancel = context.WithTimeout(ctx, cfg.Wait)
	} else {
		wctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	try := func() (jobLock, error) { return take(wctx, cfg) }
	if cfg.Wait == 0 {
		// No wait, but Admit (--vram) samples the card first, which
		// takes a while: a signal meanwhile ends it as it ends a wait.
		c := cfg
		if admit := cfg.Lock.Admit; admit != nil {
			c.Lock.Admit = func(_ context.Context, names []string) ([]bool, string) { return admit(wctx, names) }
		}
		try = func() (jobLock, error) { return tryTake(c) }
	}
	type result struct {
		held jobLock
		err  error
	}
	got := make(chan result, 1)
	go func() {
		h, err := try()
		got <- result{h, err}
	}()
	var r result
wait:
	for {
		select {
		case r = <-got:
			break wait
		case sig := <-cfg.Signals:
			if waitingSignal(sig, log) {
				continue
			}
			cancel()
			r = <-got
			if r.held != nil {
				releaseLogged(r.held, log)
			}
			log.Warn("interrupted while waiting for the GPU lock", "signal", signals.Name(sig))
			return nil, signals.ExitStatus(sig), queueEnd{Interrupted, signals.Name(sig)}
		}
	}
	if cfg.Wait == 0 {
		held, err := r.held, r.err
		var busy *lock.WaitError
		switch {
		case errors.As(err, &busy) && errors.Is(err, lock.ErrHeld):
			log.Warn("GPU lock is held by "+busy.Holders()+"; not waiting (--wait 0): job deferred", "path", cfg.Lock.Path)
			return nil, ExitDeferred, queueEnd{outcome: Deferred}
		case errors.As(err, &busy) && errors.Is(err, lock.ErrRefused):
			log.Warn("not enough free video memory: needs "+busy.Why+"; not waiting (--wait 0): job deferred", "path", cfg.Lock.Path)
			return nil, ExitDeferred, queueEnd{outcome: Deferred}
		case err != nil:
			log.Error("cannot use the GPU lock", "error", err)
			return nil, ExitFailed, queueEnd{outcome: Refused}
		}
		return held, 0, queueEnd{}
	}

	var werr *lock.WaitError
	switch {
	case r.err == nil:
		return r.held, 0, queueEnd{}
	case errors.As(r.err, &werr) && errors.Is(r.err, context.DeadlineExceeded) && werr.Why != "":
		log.Warn(fmt.Sprintf("gave up waiting for free video memory after %s: needs %s; job deferred",
			werr.Waited.Round(time.Second), werr.Why), "path", cfg.Lock.Path)
		return nil, ExitDeferred, queueEnd{outcome: Deferred}
	case errors.As(r.err, &werr) && errors.Is(r.err, context.DeadlineExceeded):
		log.Warn(fmt.Sprintf("gave up waiting for the GPU lock after %s: held by %s; job deferred",
			werr.Waited.Round(time.Second), werr.Holders()), "path", cfg.Lock.Path)
		return nil, ExitDeferred, queueEnd{outcome: Deferred}
	case ctx.Err() != nil:
		log.Warn("stopped while waiting for the GPU lock", "error", ctx.Err())
		return nil, ExitFailed, queueEnd{outcome: Interrupted}
	default:
		log.Error("cannot use the GPU lock", "error", r.err)
		return nil, ExitFailed, queueEnd{outcome: Refused}
	}
}

// waitingSignal handles a job-control signal that reaches gpuexec while no
// job runs (Ctrl+Z while waiting: gpuexec stops, keeping its place in the
// queue; SIGCONT: it goes on), reporting whether sig was one.
func waitingSignal(sig os.Signal, log hclog.Logger) bool {
	switch signals.Of(sig) {
	case signals.Stop:
		log.Debug("stopped while waiting for the GPU lock", "signal", signals.Name(sig))
		lock.Suspend(stopSelf)
		return true
	case signals.Continue:
		return true
	}
	return false
}

func releaseLogged(h jobLock, log hclog.Logger) {
	if err := h.Release(); err != nil {
		log.Error("could not release the GPU lock", "error", err)
	}
}

// childEnv is the child's environment: cfg.Env (or gpuexec's) with the
// lock's variables set (replacing any inherited ones).
func childEnv(cfg Config, held jobLock) []string {
	base := cfg.Env
	if base == nil {
		base = os.Environ()
	}
	set := append([]string{EnvLockHeld + "=1"}, held.env()...)
	if cfg.VRAM > 0 {
		set = append(set, EnvVRAM+"="+strconv.FormatInt(int64(cfg.VRAM), 10))
		// The memory was checked on the devices nvidia-smi numbers
		// (PCI order); CUDA numbers them so too unless told otherwise.
		if _, ok := lookupEnv(base, EnvDeviceOrder); !ok && !slices.ContainsFunc(set, func(kv string) bool {
			return strings.HasPrefix(kv, EnvDeviceOrder+"=")
		}) {
			set = append(set, EnvDeviceOrder+"=PCI_BUS_ID")
		}
	}
	env := make([]string, 0, len(base)+len(set))
	for _, kv := range base {
		replaced := false
		for _, s := range set {
			k, _, _ := strings.Cut(s, "=")
			replaced = replaced || strings.HasPrefix(kv, k+"=")
		}
		if !replaced {
			env = append(env, kv)
		}
	}
	return append(env, set...)
}

// supervise starts the child and watches it until it and its group are
// gone, returning the exit status and how the job ran.
func supervise(ctx context.Context, cfg Config, path string, held jobLock, st *starter) (int, ran) {
	log := cfg.Logger
	cmd := exec.Command(path, cfg.Argv[1:]...)
	cmd.Args[0] = cfg.Argv[0]
	cmd.Env = childEnv(cfg, held)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = cfg.Stdin, cfg.Stdout, cfg.Stderr
	if cmd.Stdin == nil {
		cmd.Stdin = os.Stdin
	}
	if cmd.Stdout == nil {
		cmd.Stdout = os.Stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	// With a writer that is not a file, Wait also waits for the copying of
	// output, which processes left in the group can hold open; bound it.
	cmd.WaitDelay = outputDrainWait
	configure(cmd)
	term := takeTerminal(cmd, cfg.Stdin == nil, cfg.Sentinel)
	inheritLive(cmd, held.liveFiles())

	others := childrenBefore(cfg.SoleJob)
	began := time.Now()
	done, err := st.start(cmd)
	if err != nil {
		log.Error("could not start the job", "command", cfg.Argv[0], "error", err)
		return startStatus(err), ran{}
	}
	grp, err := newGroup(cmd, cfg.SoleJob, others)
	if err != nil {
		log.Error("could not put the job in its own group; stopping it", "error", err)
		cmd.Process.Kill()
		<-done
		term.close()
		return ExitFailed, ran{}
	}
	defer grp.close()
	if err := term.started(cmd.Process.Pid, grp.id()); err != nil {
		log.Debug("no terminal sentinel: Ctrl+C in the terminal reaches the job alone", "error", err)
	}
	// The group at once where a judge finds it if gpuexec is killed; in
	// the record, for status, once the job has run a while.
	noteErr := held.NoteChild(grp.id())
	held.jobStarted()
	log.Info("job started", append([]any{"pid", cmd.Process.Pid, "command", cmdline.Line(cfg.Argv)}, held.logFields()...)...)
	if noteErr != nil {
		log.Debug("could not note the job's group in the liveness file", "error", noteErr)
	}
	rec := recordChildLater(held, grp.id(), recordChildAfter, log)
	bc := newBudgetCheck(cfg, held)
	pk := watchPeak(cfg, grp.id(), bc)

	w := &watch{cfg: cfg, grp: grp, term: term, log: log, lostC: held.Lost(), overC: bc.overC()}
	res := w.run(ctx, done)
	// The sentinel is gpuexec's child in the job's group: ended (and
	// waited for) before drain, which would take it for a process the
	// job left behind.
	term.stopSentinel()
	// The sampler's nvidia-smi is gpuexec's child: ended (and waited
	// for) before drain looks for processes the job left behind, where
	// it would be taken for one of them.
	peakFields := pk.stop()
	w.drain()
	term.close()
	rec.stop()

	code := exitStatus(res.state)
	switch {
	case w.timedOut:
		code = ExitTimeout
	case w.lostStop:
		code = ExitFailed
	case w.overStop:
		code = ExitOverBudget
	}
	log.Info("job exited", append([]any{"status", code, "child", describe(res), "duration", time.Since(began).Round(time.Millisecond).String()}, peakFields...)...)
	r := ran{timedOut: w.timedOut, lost: w.lostStop, over: w.overStop, signal: w.signal, ctxEnded: w.ctxEnded}
	if pk != nil {
		r.sampled, r.peak, r.unused, r.idleWarned = pk.sampled && !pk.unknown, pk.max, pk.unused, pk.warned
	}
	return code, r
}

// ran is how a job that held the lock ran, for End.
type ran struct {
	timedOut, lost, over bool
	signal               os.Signal // the first that ended it (forwarded, or from the terminal)
	ctxEnded             bool      // Run's context ended it
	sampled              bool
	peak                 gpu.MiB
	unused               time.Duration
	idleWarned           bool
}

// fill completes e for a job that held the lock and ended with status
// code.
func (r ran) fill(e *End, code int) {
	e.Status = code
	e.Sampled, e.Peak, e.Unused, e.IdleWarned = r.sampled, r.peak, r.unused, r.idleWarned
	switch {
	case code == 0:
		e.Outcome = OK
	case r.timedOut:
		e.Outcome = Timeout
	case r.lost:
		e.Outcome = Lost
	case r.over:
		e.Outcome = OverBudget
	case r.signal != nil:
		e.Outcome, e.Signal = Interrupted, signals.Name(r.signal)
	case r.ctxEnded:
		e.Outcome = Interrupted
	default:
		e.Outcome = Failed
	}
}

// recordChildAfter is how long the job runs before its process group is
// written into the lock's record, where status shows it. What keeps the
// lock held for processes of the job that outlive gpuexec without the
// liveness file is the group noted in the liveness file the moment the job
// starts (Held.NoteChild); rewriting the record (the guard, a file written
// and renamed) as the job starts would compete for the CPU with its
// start-up and with the next job's handoff, and a job that ends sooner
// needs it nowhere.
const recordChildAfter = 100 * time.Millisecond

// recording is the pending write of the job's group into the record.
type recording struct {
	cancel chan struct{}
	done   chan struct{}
}

// recordChildLater writes the job's group id into the record once the job has
// run for after (recordChildAfter), unless stopped first.
func recordChildLater(held jobLock, id int, after time.Duration, log hclog.Logger) *recording {
	r := &recording{cancel: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		t := time.NewTimer(after)
		defer t.Stop()
		select {
		case <-r.cancel:
			return
		case <-t.C:
		}
		if err := held.RecordChild(id); err != nil {
			log.Debug("could not record the job's group in the lock", "error", err)
		}
	}()
	return r
}

// stop cancels the write if it has not begun and waits for it if it has:
// the record is not rewritten once the lock is being released.
func (r *recording) stop() {
	close(r.cancel)
	<-r.done
}
