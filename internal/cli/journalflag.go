package cli

// Which journal: --journal and GPUEXEC_JOURNAL, for the job that writes a
// line and for the commands that read them (report, top, metrics).

import (
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/gpuexec/gpuexec/internal/escape"
	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/lock"
)

// journalOff is the --journal value that writes no journal.
const journalOff = "off"

// journalFlag is the job's --journal: one file, or off.
func journalFlag() cli.Flag {
	return &cli.StringFlag{Name: "journal", EnvVars: env("JOURNAL"), TakesFile: true, DefaultText: "beside the lock: LOCK" + journal.Suffix,
		Usage: "append one line for the job, when it ends, to this journal `FILE` (gpuexec report reads it), or off"}
}

// journalsFlag is the readers' --journal: any number of files, merged.
func journalsFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "journal", EnvVars: env("JOURNAL"), TakesFile: true, DefaultText: "beside the lock: LOCK" + journal.Suffix,
		Usage: "read this journal `FILE` and its rotated files; give it again for more (several hosts), merged"}
}

// journalPath is the file the job's line goes to: --journal, else the one
// beside the lock file at lockPath (of backend b); "" for none: --journal
// off, or an etcd lock without --journal (a URL has no folder to put one
// in).
func journalPath(c *cli.Context, lockPath string, b lock.Backend) (string, error) {
	p := c.String("journal")
	switch {
	case p == journalOff:
		return "", nil
	case p != "":
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", failed("--journal %q: %v", p, err)
		}
		if lock.OwnFile(lockPath, abs) {
			return "", failed("--journal %s is one of the lock's own files: name a file of its own (the default is beside the lock: %s)", escape.Quote(abs), escape.Quote(lockPath+journal.Suffix))
		}
		return abs, nil
	case b != lock.Files:
		return "", nil
	}
	return lockPath + journal.Suffix, nil
}

// journalPaths are the journals a reader reads: each --journal, else the
// one beside the lock file at lockPath (of backend b); an etcd lock has
// none by default, which is said.
func journalPaths(c *cli.Context, lockPath string, b lock.Backend) ([]string, error) {
	var out []string
	for _, p := range c.StringSlice("journal") {
		if p == "" {
			continue // GPUEXEC_JOURNAL set empty: as if not set
		}
		if p == journalOff {
			return nil, failed("--journal off writes no journal; name a journal file to read")
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, failed("--journal %q: %v", p, err)
		}
		out = append(out, abs)
	}
	if len(out) > 0 {
		return out, nil
	}
	if b != lock.Files {
		return nil, failed("an etcd lock has no journal of its own: name the files the jobs write with --journal FILE")
	}
	return []string{lockPath + journal.Suffix}, nil
}
