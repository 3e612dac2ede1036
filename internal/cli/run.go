package cli

// The run command: the job's flags into a supervisor.Config, its loggers,
// then supervisor.Run.

import (
	"context"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/gpuexec/gpuexec/internal/logfile"
	"github.com/gpuexec/gpuexec/lock"
	"github.com/gpuexec/gpuexec/signals"
	"github.com/gpuexec/gpuexec/supervisor"
)

func runJob(c *cli.Context, argv []string, stderr io.Writer) error {
	// nvidia-smi may run before gpuexec queues (a --gpus UUID mapped to
	// its index, --gpus all counted, --vram checked): a signal that ends
	// gpuexec meanwhile stops it, and gpuexec ends with the signal's
	// status, leaving nothing running. The watch ends once the job's own
	// handling has begun, so that no signal falls between the two.
	ctx, ended := signals.Ending(context.Background())
	defer ended()
	interrupted := func(err error) error {
		if sig := ended(); sig != nil {
			return cli.Exit("interrupted by "+signals.Name(sig)+" before queueing for the GPU lock", signals.ExitStatus(sig))
		}
		return err
	}
	cfg, ignored, err := jobConfig(ctx, c, argv)
	if err != nil {
		return interrupted(err)
	}
	jnl, err := newJobJournal(c, cfg)
	if err != nil {
		return interrupted(err)
	}
	// Every line names the job, so that the lines of several jobs in one
	// --log file or journal can be told apart.
	fields := jobFields(cfg.Lock)
	logger, closeLog, err := newLogger(c, stderr, fields)
	if err != nil {
		return interrupted(err)
	}
	defer closeLog()
	job := logger.With(fields...)
	if ignored != "" {
		job.Warn(ignored)
	}
	cfg.Lock.Logger = job.Named("lock")
	cfg.Logger = job.Named("supervisor")
	sigs, stop := signals.Notify()
	// Stopping waits for the Go runtime's signal thread, a round trip to
	// it per signal (about half a millisecond on a small VM): it is left
	// to the background, which a gpuexec about to exit does not wait for.
	defer func() { go stop() }()
	if err := interrupted(nil); err != nil {
		return err
	}
	cfg.Signals = sigs
	// The journal's line is written once Run has returned, the lock
	// released: never on the way from one holder to the next.
	var end *supervisor.End
	cfg.Ended = func(e supervisor.End) { end = &e }
	code := supervisor.Run(context.Background(), cfg)
	if end != nil {
		jnl.write(*end, job.Named("journal"))
	}
	if code != 0 {
		return cli.Exit("", code)
	}
	return nil
}

// jobConfig reads the job's flags into its Config and checks them, the
// GPUs too (which may run nvidia-smi, bound by ctx); ignored is a line to
// log about a variable that has no effect on this job (see etcdPoll).
func jobConfig(ctx context.Context, c *cli.Context, argv []string) (cfg supervisor.Config, ignored string, err error) {
	if len(argv) == 0 {
		return cfg, "", failed("no command given: gpuexec [flags] -- COMMAND [ARG...]")
	}
	// A flag's default is written out: a 0 is the user's.
	if err := noZeroIntervals(c, "poll", "report", "heartbeat", "stale"); err != nil {
		return cfg, "", err
	}
	// On the command line 0 devices is none (the library takes 0 for 1).
	if n := c.Int("need"); n < 1 {
		return cfg, "", failed("--need must be at least 1, got %d", n)
	}
	onLost := c.String("on-lost")
	if onLost != "stop" && onLost != "continue" {
		return cfg, "", failed("--on-lost must be stop or continue, got %q", onLost)
	}
	o, b, err := lockOptions(ctx, c, true)
	if err != nil {
		return cfg, "", err
	}
	if ignored, err = etcdPoll(c, b); err != nil {
		return cfg, "", err
	}
	o.Owner, o.Slug, o.Need = c.String("owner"), c.String("slug"), c.Int("need")
	o.Poll, o.Report, o.Heartbeat = durationOf(c, "poll"), durationOf(c, "report"), durationOf(c, "heartbeat")
	if o.Owner == "" {
		o.Owner = lock.DefaultOwner()
	}
	if o.Slug == "" {
		o.Slug = lock.SafeName(commandName(argv[0]))
	}
	vram, err := sizeOf(c, "vram")
	if err != nil {
		return cfg, "", err
	}
	src, err := gpuSource(c, vram)
	if err != nil {
		return cfg, "", err
	}
	reserve, err := sizeOf(c, "reserve")
	if err != nil {
		return cfg, "", err
	}
	sig, err := signals.Parse(c.String("signal"))
	if err != nil {
		return cfg, "", failed("--signal: %v", err)
	}
	cfg = supervisor.Config{
		Lock:           o,
		Backend:        b,
		Wait:           durationOf(c, "wait"),
		Argv:           argv,
		Timeout:        durationOf(c, "timeout"),
		TimeoutSignal:  sig,
		KillAfter:      killAfter(c, b, o),
		ContinueOnLost: onLost == "continue",
		SoleJob:        true,
		Sentinel:       true,
		NotFoundHint:   didYouMean(c.App.VisibleCommands()),
		VRAM:           vram,
		GPU:            src,
		Share:          c.Bool("share"),
		Reserve:        reserve,
		VRAMEnforce:    c.Bool("vram-enforce"),
		IdleWarn:       durationOf(c, "idle-warn"),
	}
	if err := cfg.Validate(); err != nil {
		return cfg, "", optionFailed(err)
	}
	if err := cfg.CheckGPUs(ctx); err != nil {
		return cfg, "", optionFailed(err)
	}
	return cfg, ignored, nil
}

// killAfter is --kill-after, or when the user gave none (flag or
// variable), the default for the lock o of backend b: shorter with an etcd
// lock of a short ttl.
func killAfter(c *cli.Context, b lock.Backend, o lock.Options) time.Duration {
	if c.IsSet("kill-after") {
		return durationOf(c, "kill-after")
	}
	return supervisor.KillAfterFor(b, o)
}

// etcdPoll is what --poll comes to with an etcd lock (backend b), where
// it has no effect (the lease is the heartbeat): given on the command line
// it is refused; from GPUEXEC_POLL alone, which may be meant for the lock
// files of other jobs, it is ignored, and ignored is the line that says
// so. Neither without an etcd lock or a --poll.
func etcdPoll(c *cli.Context, b lock.Backend) (ignored string, err error) {
	if b == lock.Files || !c.IsSet("poll") {
		return "", nil
	}
	// A value given both ways is the command line's; the same value
	// given both ways is taken for the variable's.
	if v, set := os.LookupEnv("GPUEXEC_POLL"); set {
		if d, err := parseDuration(v, nil); err == nil && d == durationOf(c, "poll") {
			return "GPUEXEC_POLL has no effect on an etcd lock (its lease is the heartbeat): ignored", nil
		}
	}
	return "", failed("--poll has no effect on an etcd lock: its lease is the heartbeat (the URL's ttl=); leave --poll out")
}

// jobFields are the fields every log line of the job carries: who runs it,
// which job, this gpuexec's pid, and with --gpus the devices it may take
// (the lines that take them say which).
func jobFields(o lock.Options) []any {
	f := []any{"owner", o.Owner, "slug", o.Slug, "gpuexec-pid", os.Getpid()}
	if o.Devices != nil {
		f = append(f, "gpus", strings.Join(o.Devices, ","))
	}
	return f
}

// newLogger builds the root logger: lines on stderr in --log-format and,
// with --log, a file (in --log-format, or JSON with --log-json) that gets
// the same lines, rotated by size. Several gpuexec processes may name the
// same file: see package logfile. What becomes of the file is said on
// stderr alone (see logSink), in lines that carry fields.
func newLogger(c *cli.Context, stderr io.Writer, fields []any) (hclog.InterceptLogger, func(), error) {
	level := hclog.LevelFromString(c.String("log-level"))
	if level == hclog.NoLevel {
		return nil, nil, failed("--log-level must be trace, debug, info, warn, error or off, got %q", c.String("log-level"))
	}
	format := c.String("log-format")
	if format != "text" && format != "json" {
		return nil, nil, failed("--log-format must be text or json, got %q", format)
	}
	logger := hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name:       "gpuexec",
		Level:      level,
		Output:     stderr,
		JSONFormat: format == "json",
	})
	path := c.String("log")
	if path == "" {
		return logger, func() {}, nil
	}
	for _, n := range []string{"log-max-size", "log-max-backups", "log-max-age"} {
		if c.Int(n) < 0 {
			return nil, nil, failed("--%s must not be negative, got %d", n, c.Int(n))
		}
	}
	// The file's errors would be lost in the logger: find out now whether
	// it can be written, and safely (see logFile).
	path, err := logFile(path)
	if err != nil {
		return nil, nil, failed("--log: %v", err)
	}
	maxSize := int64(c.Int("log-max-size"))
	if maxSize == 0 {
		maxSize = 100 // as lumberjack, which gpuexec used before, took 0
	}
	sink := &logSink{
		warn: hclog.New(&hclog.LoggerOptions{
			Name:       "gpuexec.log",
			Level:      level,
			Output:     stderr,
			JSONFormat: format == "json",
		}).With(fields...),
		said: map[string]bool{},
	}
	file, err := logfile.Open(path, logfile.Options{
		MaxSize:      maxSize << 20,
		MaxBackups:   c.Int("log-max-backups"),
		MaxAge:       time.Duration(c.Int("log-max-age")) * 24 * time.Hour,
		RotateFailed: sink.rotateFailed,
	})
	if err != nil {
		return nil, nil, failed("--log: %v", err)
	}
	sink.file = file
	logger.RegisterSink(hclog.NewSinkAdapter(&hclog.LoggerOptions{
		Name:       "gpuexec",
		Level:      level,
		Output:     sink,
		JSONFormat: format == "json" || c.Bool("log-json"),
	}))
	return logger, func() { file.Close() }, nil
}
