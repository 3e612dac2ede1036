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
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
	// Timeout is the longest run of the child; 0 is none. It goes into
	// the lock's record as its deadline (lock.Options.HoldLimit), which
	// waiters show, unless Lock.HoldLimit is set.
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

// Validate reports what is wrong with cfg, touching nothing: the lock's
// options as its backend checks them, and the job's durations (an
// *lock.OptionError naming wait, timeout or kill-after), KillAfter with
// a lock.Leased backend's lock among them: under a third of its lease's
// ttl, unless ContinueOnLost. Run checks the same; a
// program calls it to refuse bad input before it starts.
func (cfg Config) Validate() error {
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

// leaseGrace checks KillAfter against an etcd lock's lease: a holder cut
// off from etcd declares the lock lost and stops the job two thirds of the
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

// Run runs the job and returns gpuexec's exit status. Failures are logged.
func Run(ctx context.Context, cfg Config) int {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	log := cfg.Logger
	if cfg.Lock.HoldLimit == 0 {
		cfg.Lock.HoldLimit = cfg.Timeout
	}
	if len(cfg.Argv) == 0 || cfg.Argv[0] == "" {
		log.Error("no command given: gpuexec [flags] -- COMMAND [ARG...]")
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
	held, who, reentrant := nested(cfg)
	if reentrant {
		log.Info("the GPU lock is already held for this job by "+who+"; running the command at once (reentrant)",
			"path", cfg.Lock.Path)
	} else {
		switch {
		case cfg.Share:
			cfg.Lock.ShareMiB = int64(cfg.VRAM)
			cfg.Lock.AdmitShare = newGate(cfg).admitShared
		case cfg.VRAM > 0:
			cfg.Lock.Admit = newGate(cfg).admit
		}
		if held, code = acquire(ctx, cfg); held == nil {
			return code
		}
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
			return signals.ExitStatus(sig)
		default:
			pending = false
		}
	}

	code = supervise(ctx, cfg, path, held, st)
	releaseLogged(held, log)
	return code
}

// findCommand finds the command as exec would, mapping failures to 126/127.
func findCommand(name string) (string, int, error) {
	path, err := exec.LookPath(name)
	switch {
	case err == nil:
		return path, 0, nil
	case errors.Is(err, fs.ErrPermission):
		return "", ExitCannotExec, fmt.Errorf("%s: command found but not executable", name)
	case errors.Is(err, syscall.EISDIR):
		return "", ExitCannotExec, fmt.Errorf("%s: is a folder, not a command", name)
	case errors.Is(err, exec.ErrDot):
		return "", ExitCannotExec, fmt.Errorf("%s: found only in the current folder; run it as ./%s", name, name)
	}
	if err := notRunnable(name); err != nil {
		return "", ExitCannotExec, err
	}
	return "", ExitNotFound, fmt.Errorf("%s: command not found", name)
}

// acquire queues for the lock, returning it, or nil and the exit status.
func acquire(ctx context.Context, cfg Config) (jobLock, int) {
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
			return nil, signals.ExitStatus(sig)
		}
	}
	if cfg.Wait == 0 {
		held, err := r.held, r.err
		var busy *lock.WaitError
		switch {
		case errors.As(err, &busy) && errors.Is(err, lock.ErrHeld):
			log.Warn("GPU lock is held by "+busy.Holders()+"; not waiting (--wait 0): job deferred", "path", cfg.Lock.Path)
			return nil, ExitDeferred
		case errors.As(err, &busy) && errors.Is(err, lock.ErrRefused):
			log.Warn("not enough free video memory: needs "+busy.Why+"; not waiting (--wait 0): job deferred", "path", cfg.Lock.Path)
			return nil, ExitDeferred
		case err != nil:
			log.Error("cannot use the GPU lock", "error", err)
			return nil, ExitFailed
		}
		return held, 0
	}

	var werr *lock.WaitError
	switch {
	case r.err == nil:
		return r.held, 0
	case errors.As(r.err, &werr) && errors.Is(r.err, context.DeadlineExceeded) && werr.Why != "":
		log.Warn(fmt.Sprintf("gave up waiting for free video memory after %s: needs %s; job deferred",
			werr.Waited.Round(time.Second), werr.Why), "path", cfg.Lock.Path)
		return nil, ExitDeferred
	case errors.As(r.err, &werr) && errors.Is(r.err, context.DeadlineExceeded):
		log.Warn(fmt.Sprintf("gave up waiting for the GPU lock after %s: held by %s; job deferred",
			werr.Waited.Round(time.Second), werr.Holders()), "path", cfg.Lock.Path)
		return nil, ExitDeferred
	case ctx.Err() != nil:
		log.Warn("stopped while waiting for the GPU lock", "error", ctx.Err())
		return nil, ExitFailed
	default:
		log.Error("cannot use the GPU lock", "error", r.err)
		return nil, ExitFailed
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

// waited is how the child ended.
type waited struct {
	state *os.ProcessState
	err   error
}

// starter is a goroutine locked to an OS thread of its own that forks the
// child and keeps that thread alive until close: on Linux the child's
// parent-death signal fires when the thread that forked it ends. It is made
// before the lock is queued for, so that creating the thread and the
// runtime's checks before a first fork (see warmUp) are done by the time
// the lock is handed over, not after. The child is waited for on an
// ordinary goroutine, which hands its end to the watch loop without waking
// another thread.
type starter struct {
	cmds    chan *exec.Cmd
	started chan error
	end     chan struct{}
}

func newStarter() *starter {
	s := &starter{cmds: make(chan *exec.Cmd), started: make(chan error, 1), end: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread exits with this goroutine, at close.
		warmUp()
		select {
		case cmd := <-s.cmds:
			s.started <- cmd.Start()
		case <-s.end:
			return
		}
		<-s.end
	}()
	return s
}

// start starts cmd on the starter's thread; the channel delivers its end.
// Call at most once.
func (s *starter) start(cmd *exec.Cmd) (<-chan waited, error) {
	s.cmds <- cmd
	if err := <-s.started; err != nil {
		return nil, err
	}
	done := make(chan waited, 1)
	go func() {
		err := cmd.Wait()
		done <- waited{cmd.ProcessState, err}
	}()
	return done, nil
}

// close lets the starter's thread end. Call once the child is reaped and
// its group drained: on Linux the thread's end would kill a child still
// running.
func (s *starter) close() { close(s.end) }

// supervise starts the child and watches it until it and its group are
// gone, returning the exit status.
func supervise(ctx context.Context, cfg Config, path string, held jobLock, st *starter) int {
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
		return startStatus(err)
	}
	grp, err := newGroup(cmd, cfg.SoleJob, others)
	if err != nil {
		log.Error("could not put the job in its own group; stopping it", "error", err)
		cmd.Process.Kill()
		<-done
		term.close()
		return ExitFailed
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
	rec := recordChild(held, grp.id(), recordChildAfter, log)
	bc := newBudgetCheck(cfg, held)
	pk := watchPeak(cfg.GPU, grp.id(), bc)

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
	return code
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

// recordChild writes the job's group id into the record once the job has
// run for after (recordChildAfter), unless stopped first.
func recordChild(held jobLock, id int, after time.Duration, log hclog.Logger) *recording {
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
	w.log.Warn("the job's command exited but left processes behind; stopping them", "left", w.grp.describeLeft())
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
