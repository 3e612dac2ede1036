package cli

// The metrics command: the lock, its queue, the GPUs (read as status reads
// them) and the journal, read once and printed in Prometheus' text format
// (package metrics), or written into a file for node_exporter's textfile
// collector.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuexec/gpuexec/internal/escape"
	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/metrics"
	"github.com/gpuexec/gpuexec/lock"
	"github.com/gpuexec/gpuexec/signals"
)

// metricsFlags are the metrics command's flags: status's lock and GPU
// flags, the readers' --journal, and --textfile.
func metricsFlags() []cli.Flag {
	return []cli.Flag{
		lockFlag(), staleFlag(), gpusFlag(), gpuCountFlag(), nvidiaSMIFlag(), journalsFlag(),
		&cli.StringFlag{Name: "textfile", EnvVars: env("TEXTFILE"), TakesFile: true,
			Usage: "write the metrics into this `FILE` (for node_exporter's textfile collector: NAME.prom) at once, by a rename, instead of printing them"},
	}
}

func metricsCmd(c *cli.Context, stdout, stderr io.Writer) error {
	o, b, err := lockCommand(c, true)
	if err != nil {
		return err
	}
	target := c.String("textfile")
	if err := checkTextfile(target); err != nil {
		return err
	}
	journals, err := metricsJournals(c, o.Path, b)
	if err != nil {
		return err
	}
	s, err := readSnapshot(c, stderr, o, b, journals)
	if err != nil {
		return err
	}
	fams := metrics.Families(s)
	if target != "" {
		return replaceFile("--textfile", target, checkTextfile, func(w io.Writer) error { return metrics.WriteText(w, fams) })
	}
	if err := metrics.WriteText(stdout, fams); err != nil {
		return failed("%v", err)
	}
	return nil
}

// checkTextfile refuses a --textfile that names something other than a
// regular file (a link, a folder, a FIFO): the rename would replace it.
// One that does not exist yet is written.
func checkTextfile(path string) error {
	if path == "" {
		return nil
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return failed("--textfile: %v", err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return failed("--textfile %s is a symbolic link: name the file itself", path)
	case fi.IsDir():
		return failed("--textfile %s is a folder: name a file in it (gpuexec.prom)", path)
	case !fi.Mode().IsRegular():
		return failed("--textfile %s is not a regular file (%s)", path, fi.Mode().Type())
	}
	return nil
}

// metricsJournals are the journals metrics reads: journalPaths', but
// --journal off (GPUEXEC_JOURNAL=off, set for the jobs) and an etcd lock
// without --journal have none (no journal metrics), not an error: the
// lock's and the cards' metrics still come out.
func metricsJournals(c *cli.Context, lockPath string, b lock.Backend) ([]string, error) {
	if slices.Contains(c.StringSlice("journal"), journalOff) || b != lock.Files && len(c.StringSlice("journal")) == 0 {
		return nil, nil
	}
	return journalPaths(c, lockPath, b)
}

// readSnapshot reads the lock o of backend b as status does (one
// Inspect, the cards from statusCards) and the journals: a lock that
// cannot be read is status's error; GPUs or journals that cannot be read
// are one warning line each on stderr, and their *_readable metric 0.
func readSnapshot(c *cli.Context, stderr io.Writer, o lock.Options, b lock.Backend, journals []string) (metrics.Snapshot, error) {
	r, err := b.Inspect(o)
	if err != nil {
		return metrics.Snapshot{}, unreadable(o.Path, err)
	}
	s := metrics.Snapshot{At: time.Now(), Report: r}
	// A signal that ends gpuexec while nvidia-smi runs stops it first.
	ctx, ended := signals.Ending(context.Background())
	cards, gerr := statusCards(ctx, c, b, r.Locks)
	if sig := ended(); sig != nil {
		return s, readingInterrupted(sig)
	}
	var ec cli.ExitCoder
	switch {
	case errors.As(gerr, &ec):
		return s, gerr
	case cards != nil:
		// Without their processes (gerr) the cards' memory is known.
		s.Cards, s.CardsRead = cards, true
	case gerr != nil:
		fmt.Fprintln(stderr, "gpuexec: warning: GPUs unknown: "+escape.Text(gerr.Error()))
	}
	if journals != nil {
		rd, err := journal.Load(journals, journal.Window{})
		if err != nil {
			fmt.Fprintln(stderr, "gpuexec: warning: journal unreadable: "+escape.Text(err.Error()))
			s.JournalFailed = true
		} else {
			s.Journal = rd
		}
	}
	return s, nil
}
