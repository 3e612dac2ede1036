package cli

// gpuexec report: what the journal says of a window of time, as text, one
// JSON object, or one HTML page (package report).

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuexec/gpuexec/internal/escape"
	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/report"
)

func reportCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "report",
		Usage: "sum up the journal: jobs per owner by outcome, GPU-hours, waits, the jobs that did not run or failed, idle cards; as text, --json or an --html page",
		Description: "Flags may also come before the subcommand (gpuexec --lock PATH report); one given after it wins. " +
			"--lock reads GPUEXEC_LOCK and --journal GPUEXEC_JOURNAL; a GPUEXEC_OWNER set for jobs does not narrow a report.\n\n--since and --until take a duration ago (7d, 36h, 90m, 2w), an RFC 3339 time (2026-12-01T08:00:00Z) or a date " +
			"(2026-12-01, midnight in the local time zone). A job is counted when it ended in the window; its waits and holds are cut to it. " +
			"With --html the page goes to FILE (written whole, then renamed over it) and nothing to stdout but --json's object when asked. " +
			"No journal file found is one line and status 125.",
		Flags: append(subcommandFlags(
			lockFlag(),
			&cli.StringFlag{Name: "since", Value: "7d", Usage: "report from this `TIME` (a duration ago, an RFC 3339 time or a date)"},
			&cli.StringFlag{Name: "until", DefaultText: "now", Usage: "report up to this `TIME` (as --since)"},
			&cli.StringSliceFlag{Name: "owner", Usage: "the jobs of this `NAME` alone; give it again, or a comma list, for several"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
			&cli.StringFlag{Name: "html", TakesFile: true, Usage: "write one self-contained HTML page (a timeline per card, the tables) to `FILE`"},
			journalsFlag(),
		),
			// --unused is report's alone: it reads its variable itself.
			durationFlag("unused", report.DefaultUnused, "REPORT_UNUSED", "list the jobs that held the card with no video memory in use this long", nil),
		),
		Before:       inheritFlags,
		Action:       func(c *cli.Context) error { return reportCmd(c, stdout) },
		OnUsageError: usageError,
	}
}

func reportCmd(c *cli.Context, stdout io.Writer) error {
	if err := noArgs(c); err != nil {
		return err
	}
	now := time.Now()
	since, err := reportTime(c.String("since"), now)
	if err != nil {
		return failed("--since %s: %v", quote(c.String("since")), err)
	}
	until := now
	if c.IsSet("until") {
		if until, err = reportTime(c.String("until"), now); err != nil {
			return failed("--until %s: %v", quote(c.String("until")), err)
		}
	}
	if !since.Before(until) {
		return failed("--since %s is not before --until %s", since.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
	}
	var owners []string
	for _, o := range c.StringSlice("owner") {
		for _, n := range strings.Split(o, ",") {
			if n = strings.TrimSpace(n); n != "" {
				owners = append(owners, n)
			}
		}
	}
	unused := durationOf(c, "unused")
	if unused <= 0 {
		return failed("--unused must be more than 0, got %s", unused)
	}
	htmlPath := c.String("html")
	if c.IsSet("html") && htmlPath == "" {
		return failed("--html needs a FILE")
	}
	if htmlPath != "" {
		if err := htmlTarget(htmlPath); err != nil {
			return err
		}
	}
	lockPath, b, err := lockBackend(c)
	if err != nil {
		return err
	}
	paths, err := journalPaths(c, lockPath, b)
	if err != nil {
		return err
	}
	// Records are chosen by their end; those that ended after --until
	// are left to Summarize, which cuts the window the same way.
	rd, err := journal.Load(paths, journal.Window{From: since, Until: until})
	if err != nil {
		return failed("journal: %s", escape.Text(err.Error()))
	}
	if len(rd.Files) == 0 {
		if len(paths) == 1 {
			return failed("no journal at %s: no job has ended there yet, or the jobs write it elsewhere (name it with --journal FILE)", escape.Quote(paths[0]))
		}
		return failed("none of the %d journals named exists (%s, ...)", len(paths), escape.Quote(paths[0]))
	}
	s := report.Summarize(rd, report.Options{Since: since, Until: until, Owners: owners, Unused: unused, Now: now})
	if htmlPath != "" {
		if err := writeHTMLFile(htmlPath, s); err != nil {
			return err
		}
	}
	switch {
	case c.Bool("json"):
		err = report.WriteJSON(stdout, s)
	case htmlPath == "":
		err = report.WriteText(stdout, s)
	}
	if err != nil {
		return failed("writing the report: %v", err)
	}
	return nil
}

// reportTime is a --since or --until value: a duration before now (Go's,
// or whole days "7d" and weeks "2w"), an RFC 3339 time, a date and time
// without a zone ("2026-12-01T08:00", "2026-12-01 08:00") or a date
// ("2026-12-01"), both in the local time zone.
func reportTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, errors.New("empty: give a duration ago (7d), an RFC 3339 time or a date (2026-12-01)")
	}
	if d, ok := daysOrWeeks(s); ok {
		return now.Add(-d), nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, errors.New("a duration ago is not negative")
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("not a duration ago (7d, 36h, 90m), an RFC 3339 time (2026-12-01T08:00:00Z) or a date (2026-12-01)")
}

// daysOrWeeks reads "7d" and "2w" (whole numbers, up to ten years).
func daysOrWeeks(s string) (time.Duration, bool) {
	if len(s) < 2 {
		return 0, false
	}
	unit := map[byte]time.Duration{'d': 24 * time.Hour, 'w': 7 * 24 * time.Hour}[s[len(s)-1]]
	if unit == 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(s[:len(s)-1], 10, 32)
	if err != nil || time.Duration(n)*unit > 3653*24*time.Hour {
		return 0, false
	}
	return time.Duration(n) * unit, true
}

// htmlTarget refuses an --html FILE that is there and is not a regular
// file (a link, a folder, a FIFO): the page replaces a file, never what a
// link points at.
func htmlTarget(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return failed("--html %s: %v", escape.Quote(path), err)
	case !fi.Mode().IsRegular():
		return failed("--html %s is not a regular file (%s): refused; name a new file or a regular one to replace", escape.Quote(path), kindOf(fi))
	}
	return nil
}

func kindOf(fi fs.FileInfo) string {
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	}
	return "not a plain file"
}

// writeHTMLFile writes the page at once (replaceFile): a reader of path
// sees the old page or the new one whole.
func writeHTMLFile(path string, s *report.Summary) error {
	return replaceFile("--html", path, htmlTarget, func(w io.Writer) error { return report.WriteHTML(w, s) })
}

// reportUsage is report's line of the app's usage text.
const reportUsage = "gpuexec report [--since 7d] [--until T] [--owner NAME] [--journal FILE...] [--json] [--html FILE]"
