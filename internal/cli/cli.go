// Package cli is gpuexec's command line: its commands (run, status,
// clear, report, top, metrics, completion), flags and environment variables, help,
// usage errors, the loggers and the --log file's checks, and the text status
// and clear print. The program in the module's root hands it its arguments
// and output streams.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuexec/gpuexec/internal/etcdhelper"
	"github.com/gpuexec/gpuexec/internal/etcdurl"
	"github.com/gpuexec/gpuexec/lock"
	"github.com/gpuexec/gpuexec/signals"
	"github.com/gpuexec/gpuexec/supervisor"
)

// Version is what gpuexec --version prints after "gpuexec ", when set
// before Run: the program sets it from its build (-ldflags "-X
// main.version=v1.2.3"). Empty, --version prints the module version go
// install recorded, else "dev", with the revision and build time where
// the build recorded them.
var Version = ""

// Run is gpuexec given its arguments (args[0] the program's name, as in
// os.Args) and output streams: it does what the arguments ask, writes its
// output and messages to stdout and stderr alone, and returns the status
// the program must exit with (the job's, or one of gpuexec's own that the
// README lists); it never exits the process itself. It is meant to be
// called once, by a program's main: it first refuses to start, with status
// 125, when too few file descriptors are free, then sets the process up as
// gpuexec needs it for good (one P, GOMAXPROCS 1; a write to a closed pipe
// fails instead of ending the process).
func Run(args []string, stdout, stderr io.Writer) int {
	// Before anything is opened: short of file descriptors, the first
	// file opened would end gpuexec with the Go runtime's stack trace.
	if err := enoughFiles(); err != nil {
		fmt.Fprintln(stderr, "gpuexec: "+err.Error())
		return supervisor.ExitFailed
	}
	// gpuexec mostly waits; one P is all it needs, and fewer threads are
	// woken and spin while other jobs' wrappers start and stop around a
	// handoff (docs/performance.md, "Figures the code rests on").
	runtime.GOMAXPROCS(1)
	// A closed stdout or stderr (gpuexec ... | head) must never end
	// gpuexec before it has released the lock.
	signals.SurviveBrokenPipes()
	return run(args, stdout, stderr)
}

// run is Run without the set-up of the process, for the tests that run
// gpuexec in theirs.
func run(args []string, stdout, stderr io.Writer) int {
	// Everything after the first "--" is the child's argv, verbatim: the
	// parser never sees it, so a child named "status" is not a subcommand.
	var child []string
	for i, a := range args {
		if a == "--" {
			args, child = args[:i], args[i+1:]
			if child == nil {
				child = []string{}
			}
			break
		}
	}
	app := newApp(child, stdout, stderr)
	err := app.Run(spelledOut(args))
	if err == nil {
		return 0
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(stderr, "gpuexec: "+msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(stderr, "gpuexec: "+err.Error())
	return supervisor.ExitFailed
}

func getVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return versionString(Version, bi)
}

// usageError turns a flag parsing error into one line and status 125,
// without the help text.
func usageError(c *cli.Context, err error, _ bool) error {
	return cli.Exit(usageMessage(c, err), supervisor.ExitFailed)
}

func env(name string) []string { return []string{"GPUEXEC_" + name} }

func lockFlag() cli.Flag {
	return &cli.StringFlag{Name: "lock", Value: lock.DefaultPath(), EnvVars: env("LOCK"), TakesFile: true,
		Usage: "the lock `PATH`; its folder is created if missing; or etcd://HOST:PORT[,HOST:PORT...]/KEY for a lock in etcd"}
}

func staleFlag() cli.Flag {
	return durationFlag("stale", lock.DefaultStale, "STALE", "a lock whose heartbeat (mtime) is older than this is stale", nil)
}

func gpusFlag() cli.Flag {
	return &cli.StringFlag{Name: "gpus", EnvVars: env("GPUS"),
		Usage: "several GPUs, one lock each beside --lock (gpu0.lock, ...): `LIST` of indexes (0,1,3; a UUID is mapped to its index with nvidia-smi) or all; the job takes the first free. A job without --gpus waits for every one of them"}
}

func gpuCountFlag() cli.Flag {
	return &cli.IntFlag{Name: "gpu-count", EnvVars: env("GPU_COUNT"), DefaultText: "those nvidia-smi lists", Usage: "how many GPUs --gpus all means (1 to 64)"}
}

// devices is --gpus (with --gpu-count for all) as lock.Options' Devices;
// nil without --gpus.
func devices(ctx context.Context, c *cli.Context) ([]string, error) {
	list := c.String("gpus")
	if list == "" {
		return nil, nil
	}
	if list == "all" && !c.IsSet("gpu-count") {
		return discovered(ctx, c)
	}
	if list == "all" && c.Int("gpu-count") <= 0 {
		return nil, failed("--gpus all needs --gpu-count N (or GPUEXEC_GPU_COUNT) with N > 0")
	}
	if list != "all" {
		var err error
		if list, err = deviceIndexes(ctx, c, "--gpus", list); err != nil {
			return nil, err
		}
	}
	names, err := lock.ParseDevices(list, c.Int("gpu-count"))
	if err != nil {
		return nil, optionFailed(err)
	}
	return names, nil
}

// optionFailed is failed for an option the lock or the supervisor refused,
// naming the flag that sets it.
func optionFailed(err error) error {
	var oe *lock.OptionError
	if !errors.As(err, &oe) {
		return failed("%v", err)
	}
	flag := oe.Option
	switch flag {
	case "devices":
		flag = "gpus"
	case "path":
		flag = "lock"
	}
	return failed("--%s %s", flag, oe.Problem)
}

func runFlags() []cli.Flag {
	return append([]cli.Flag{
		lockFlag(),
		&cli.StringFlag{Name: "owner", EnvVars: env("OWNER"), Usage: "who holds the lock (default: login user name)"},
		&cli.StringFlag{Name: "slug", EnvVars: env("SLUG"), Usage: "which job (default: base name of COMMAND)"},
		durationFlag("wait", 150*time.Minute, "WAIT", "longest time to queue for the lock; 0 tries once, forever waits as long as it takes", waitForever),
		durationFlag("poll", lock.DefaultPoll, "POLL", "how often a waiter re-checks the lock (not with an etcd lock)", nil),
		durationFlag("report", lock.DefaultReport, "REPORT", "while waiting, log this often who holds the lock and until when, this job's place in the queue and when it defers", nil),
		durationFlag("heartbeat", lock.DefaultHeartbeat, "HEARTBEAT", "while holding, touch the lock's mtime this often", nil),
		staleFlag(),
		durationFlag("timeout", 0, "TIMEOUT", "longest run of the command, then it is stopped (exit 124); 0 is none. Waiters see when it ends (the lock records it)", nil),
		&cli.StringFlag{Name: "signal", Value: "TERM", EnvVars: env("SIGNAL"), Usage: "the first signal to the command's group at --timeout: a `NAME` (TERM, INT, HUP, KILL, USR1...) or number"},
		durationFlag("kill-after", supervisor.DefaultKillAfter, "KILL_AFTER", "SIGKILL the command's group this long after the first signal: --signal at --timeout, or a forwarded Ctrl+C, SIGTERM or SIGHUP. 0: SIGKILL with the first signal; never: no SIGKILL (a job that ignores the first signal keeps the GPU until it exits). With an etcd lock, under a third of its ttl (default there: a quarter of a ttl under 40s)", killNever),
		&cli.StringFlag{Name: "on-lost", Value: "stop", EnvVars: env("ON_LOST"), Usage: "if the lock is lost while the command runs: stop it, or continue"},
		gpusFlag(), gpuCountFlag(),
		&cli.IntFlag{Name: "need", Value: 1, EnvVars: env("NEED"), Usage: "with --gpus: how many devices the job takes at once"},
		vramFlag(), nvidiaSMIFlag(), idleWarnFlag(),
	}, append(shareFlags(), []cli.Flag{
		journalFlag(),
		&cli.StringFlag{Name: "log", EnvVars: env("LOG"), TakesFile: true, Usage: "also write the log to `FILE`, rotated; several gpuexec processes may share one"},
		&cli.IntFlag{Name: "log-max-size", Value: 100, EnvVars: env("LOG_MAX_SIZE"), Usage: "rotate the --log file at this many `MB`"},
		&cli.IntFlag{Name: "log-max-backups", Value: 5, EnvVars: env("LOG_MAX_BACKUPS"), Usage: "keep this many rotated --log files (0 keeps all)"},
		&cli.IntFlag{Name: "log-max-age", Value: 30, EnvVars: env("LOG_MAX_AGE"), Usage: "delete rotated --log files older than this many `DAYS` (0 keeps all)"},
		&cli.StringFlag{Name: "log-format", Value: "text", EnvVars: env("LOG_FORMAT"), Usage: "the log's format, on stderr and in the --log file: text, or json (one object a line)"},
		&cli.BoolFlag{Name: "log-json", EnvVars: env("LOG_JSON"), Usage: "write the --log file as JSON lines, whatever --log-format"},
		&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: env("LOG_LEVEL"), Usage: "trace, debug, info, warn, error or off"},
	}...)...)
}

func newApp(child []string, stdout, stderr io.Writer) *cli.App {
	// A job's command: what follows "--", else the words after the flags
	// (see words.go).
	runAction := func(c *cli.Context) error {
		if child == nil {
			return runJob(c, c.Args().Slice(), stderr)
		}
		if err := strayWords(c); err != nil {
			return err
		}
		return runJob(c, child, stderr)
	}
	return withWords(withCompletion(&cli.App{
		Name:      "gpuexec",
		Usage:     "run a command while holding a cross-process GPU lock",
		UsageText: "gpuexec [flags] -- COMMAND [ARG...]\ngpuexec status [--lock PATH] [--json] [--check]\ngpuexec clear [--lock PATH] [--force]\n" + reportUsage + "\ngpuexec top [--lock PATH] [--interval 1s]\ngpuexec metrics [--lock PATH] [--journal FILE]... [--textfile FILE]",
		Version:   getVersion(),
		Writer:    stdout,
		ErrWriter: stderr,
		Flags:     runFlags(),
		Action:    runAction,
		// Help: placeholders, durations, signals, exit statuses and
		// examples (help.go); completion: the completion subcommand.
		CustomAppHelpTemplate: appHelpTemplate(),
		EnableBashCompletion:  true,
		// Errors are printed once, by run.
		ExitErrHandler:  func(*cli.Context, error) {},
		OnUsageError:    usageError,
		HideHelpCommand: true,
		Commands: []*cli.Command{
			{
				Name:         "run",
				Usage:        "run COMMAND while holding the lock (the same as without a subcommand)",
				ArgsUsage:    "-- COMMAND [ARG...]",
				Description:  inheritNote,
				Flags:        subcommandFlags(runFlags()...),
				Before:       inheritFlags,
				Action:       runAction,
				OnUsageError: usageError,
			},
			{
				Name:        "status",
				Usage:       "show who holds the lock, since when, the heartbeat's age, alive or stale",
				Description: inheritNote,
				Flags: subcommandFlags(
					lockFlag(), staleFlag(), gpusFlag(), gpuCountFlag(), nvidiaSMIFlag(), statusReserveFlag(),
					&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
					&cli.BoolFlag{Name: "check", Usage: "exit 0 when free, 1 when held by a live holder, 2 when stale (with --gpus: 0 when a device is free, else 2 when one is stale, else 1)"},
				),
				Before:       inheritFlags,
				Action:       func(c *cli.Context) error { return statusCmd(c, stdout) },
				OnUsageError: usageError,
			},
			{
				Name:        "clear",
				Usage:       "remove a stale lock (a live holder's only with --force)",
				Description: inheritNote,
				Flags: subcommandFlags(
					lockFlag(), staleFlag(),
					&cli.BoolFlag{Name: "force", Usage: "remove the lock even if its holder is alive"},
				),
				Before:       inheritFlags,
				Action:       func(c *cli.Context) error { return clearCmd(c, stdout, stderr) },
				OnUsageError: usageError,
			},
			reportCommand(stdout),
			topCommand(stdout),
			{
				Name:         "metrics",
				Usage:        "print the lock, its queue, the GPUs' memory and the journal's job counts as Prometheus metrics (--textfile for node_exporter)",
				Description:  inheritNote,
				Flags:        subcommandFlags(metricsFlags()...),
				Before:       inheritFlags,
				Action:       func(c *cli.Context) error { return metricsCmd(c, stdout, stderr) },
				OnUsageError: usageError,
			},
			completionCommand(stdout),
		},
	}), child, "run")
}

// noArgs refuses stray arguments of status and clear (a "--" given to
// them is checkWords').
func noArgs(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return cli.Exit(fmt.Sprintf("%s takes no arguments, got %q", c.Command.Name, c.Args().First()), supervisor.ExitFailed)
	}
	return nil
}

// failed is gpuexec's own failure: one line, status 125.
func failed(format string, a ...any) error {
	return cli.Exit(fmt.Sprintf(format, a...), supervisor.ExitFailed)
}

// noZeroIntervals refuses a 0 given for a duration that sets how often
// gpuexec does something (polls, reports, heartbeats) or how long a lock
// lives without one: on the command line 0 is no interval, which would
// keep a core busy, where the lock library reads 0 as its default. Other
// values under lock.MinInterval the library refuses (lock.Options'
// Validate), named as the flags.
func noZeroIntervals(c *cli.Context, names ...string) error {
	for _, n := range names {
		if d := durationOf(c, n); d == 0 {
			return failed("--%s must be at least %s, got %s", n, lock.MinInterval, d)
		}
	}
	return nil
}

// lockBackend is what --lock means, the one place that decides it: an
// etcd:// URL is a lock in etcd, kept as it is and held by the etcd
// helper (its backend checks the URL); anything else is a lock file's
// path, made absolute, with lock.Files, once it is checked as written: not
// empty (lock.CheckPath), nor shaped like another URL or HOST:PORT (a
// mistyped etcd URL: made absolute it would look like a path, a lock of
// this machine alone where one shared by several was meant).
func lockBackend(c *cli.Context) (string, lock.Backend, error) {
	p := c.String("lock")
	if etcdurl.Is(p) {
		return p, etcdhelper.Backend{}, nil
	}
	if err := lock.CheckPath(p); err != nil {
		return "", nil, optionFailed(err)
	}
	if etcdurl.LooksLikeURL(p) {
		return "", nil, failed("--lock %q is shaped like a URL or HOST:PORT, not a lock file's path: "+
			"an etcd lock is %sHOST:PORT/KEY; for a file or folder here whose name has a colon, put ./ before it", p, etcdurl.Scheme)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", nil, failed("--lock %q: %v", p, err)
	}
	return abs, lock.Files, nil
}

// lockOptions are the lock flags common to run, status and clear, and the
// backend of the lock they name; with devices, --gpus too (clear has none:
// a --gpus or GPUEXEC_GPUS meant for jobs does not reach it).
func lockOptions(ctx context.Context, c *cli.Context, withDevices bool) (lock.Options, lock.Backend, error) {
	path, b, err := lockBackend(c)
	if err != nil {
		return lock.Options{}, nil, err
	}
	o := lock.Options{Path: path, Stale: durationOf(c, "stale")}
	if withDevices {
		if o.Devices, err = devices(ctx, c); err != nil {
			return o, b, err
		}
		// A device's lock named by its path is that device of the lock
		// beside it (gpu1.lock: --gpus 1 of gpu.lock), checked as
		// --gpus is.
		if o.Devices == nil && b == lock.Files {
			if o = o.Canonical(); o.Devices != nil {
				if _, err := deviceIndexes(ctx, c, "--lock "+filepath.Base(path), o.Devices[0]); err != nil {
					return o, b, err
				}
			}
		}
	}
	return o, b, nil
}
