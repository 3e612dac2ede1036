package cli

import (
	"io"
	"os"
	"path/filepath"

	"github.com/gpuexec/gpuexec/internal/escape"
)

// replaceFile writes a file that readers may be reading (report --html,
// metrics --textfile) at once: write fills a new file beside path (named
// .BASE.*.tmp, which node_exporter's textfile collector does not read), it
// is synced to disk and made 0644, check is run again on path for what
// appeared while it was written, and it is renamed over path. A reader of
// path sees the old content or the new one whole, never a part; a crash
// leaves the old one. An error is one line naming flag and path (status
// 125), check's refusal as check gives it; the new file is then removed.
//
// A link made after the check is replaced by the rename, never followed:
// rename acts on the name, not on what a link points at.
func replaceFile(flag, path string, check func(string) error, write func(io.Writer) error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	fail := func(err error) error { return failed("%s %s: %v", flag, escape.Quote(path), err) }
	tmp, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return fail(err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		return fail(err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := check(path); err != nil {
		os.Remove(tmp.Name())
		done = true
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fail(err)
	}
	done = true
	return nil
}
