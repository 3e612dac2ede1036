package cli

import (
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
)

// How --help and --version read: placeholders that say what a flag takes
// (DURATION, N), the exit statuses, what signals do, and examples.

func init() {
	plain := cli.FlagStringer
	cli.FlagStringer = func(f cli.Flag) string { return flagHelp(f, plain(f)) }
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, c.App.Name+" "+c.App.Version) }
	// gpuexec answers --help itself, once it has checked the words that
	// come with it (words.go): urfave/cli's flag would print and ignore
	// them.
	cli.HelpFlag = nil
}

// appHelpTemplate is gpuexec --help: urfave/cli's, with the version,
// which it shows only while it answers --version itself (HideVersion, see
// words.go), and helpTail.
func appHelpTemplate() string {
	return strings.Replace(cli.AppHelpTemplate, "{{if .Version}}{{if not .HideVersion}}", "{{if .Version}}{{if true}}", 1) + helpTail
}

// placeholders name what the flags whose usage names nothing take.
var placeholders = map[string]string{
	"owner":      "NAME",
	"slug":       "NAME",
	"on-lost":    "stop|continue",
	"log-level":  "LEVEL",
	"log-format": "text|json",
	"nvidia-smi": "PATH",
}

// durationDefaultRE is compiled when help is first shown, not at every start.
var durationDefaultRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\(default: ([0-9hms.]+)\)`) })

// flagHelp is the help line of f, given urfave's (plain): "--wait
// DURATION" rather than "--wait value", "--need N", and defaults written
// as users write durations (2h30m, not 2h30m0s).
func flagHelp(f cli.Flag, plain string) string {
	name := f.Names()[0]
	placeholder := placeholders[name]
	switch {
	case isDurationFlag(f):
		placeholder = "DURATION"
		re := durationDefaultRE()
		plain = re.ReplaceAllStringFunc(plain, func(m string) string {
			d, err := time.ParseDuration(re.FindStringSubmatch(m)[1])
			if err != nil {
				return m
			}
			return "(default: " + shortDuration(d) + ")"
		})
	case isIntFlag(f):
		if placeholder == "" {
			placeholder = "N"
		}
	}
	if placeholder == "" {
		return plain
	}
	return strings.Replace(plain, "--"+name+" value", "--"+name+" "+placeholder, 1)
}

func isIntFlag(f cli.Flag) bool { _, ok := f.(*cli.IntFlag); return ok }

// shortDuration is d as users write it: 2h30m, 1h, 90m, 10s, 0.
func shortDuration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// helpTail follows the flags in gpuexec --help.
const helpTail = `
DURATIONS:
   A number and a unit: 500ms, 90s, 20m, 1h30m (units ns, us, ms, s, m, h; there is no d), never
   negative; a positive one below 1ns is 1ns. --wait forever waits as long as it takes (also inf,
   infinity); --kill-after never sends no SIGKILL.

SIGNALS:
   Ctrl+C, SIGTERM, SIGHUP and SIGQUIT reaching gpuexec are forwarded to the command's process group;
   like --signal at --timeout, each is followed by SIGKILL after --kill-after if the job still runs
   (never with --kill-after never), and a stopped job is continued (SIGCONT) so that it acts on it. In a terminal (Linux) the job has
   the terminal, so Ctrl+C and Ctrl+\ reach it directly; gpuexec hears of them and they count as
   forwarded (SIGKILL after --kill-after), also after Ctrl+Z and fg.
   A SIGHUP or SIGINT ignored when gpuexec starts (nohup, a script's cmd &) stays ignored, by
   gpuexec and by the job. SIGQUIT and SIGPIPE are not kept so (Go cannot tell them ignored): the
   job starts with both at their defaults.

EXIT STATUS:
   the command's    the command exited
   128+N            the command died of signal N (137: SIGKILL)
   124              the command was stopped at --timeout (whatever --signal)
   123              a --share job used more video memory than its budget (--vram-enforce)
   75               deferred: gave up waiting for the lock (--wait); not a failure, try again later
   125              gpuexec failed: bad flags or environment, unusable lock, lock lost (one line)
   126, 127         COMMAND found but not executable, or not found (no lock taken)
   130, 143         interrupted while waiting by SIGINT, SIGTERM (128+N: SIGHUP 129, SIGQUIT 131)
   status --check: 0 free, 1 held, 2 stale, 125 unreadable.

EXAMPLES:
   gpuexec --owner channels --slug ep12 -- python render.py
   gpuexec --wait 20m --timeout 2h --signal INT -- python train.py   # 75: deferred, 124: timed out
   gpuexec --lock /var/lib/gpuexec/gpu.lock status --check || echo "GPU busy"
`

// versionString is what gpuexec --version prints after "gpuexec ": the
// version set at build time (-ldflags -X main.version=...), else the
// module's (go install), else "dev"; then, when the build recorded it,
// the VCS revision, its date and whether the tree was modified: "v1.2.3
// (rev 0123456789ab, 2026-11-30, modified)".
func versionString(set string, bi *debug.BuildInfo) string {
	v := set
	if v == "" && bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	if v == "" {
		v = "dev"
	}
	if bi == nil {
		return v
	}
	var rev, date, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				date = t.UTC().Format("2006-01-02")
			}
		case "vcs.modified":
			if s.Value == "true" {
				modified = "modified"
			}
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	parts := []string{"rev " + rev}
	for _, p := range []string{date, modified} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return v + " (" + strings.Join(parts, ", ") + ")"
}
