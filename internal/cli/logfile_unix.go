//go:build unix

package cli

import (
	"fmt"
	"path/filepath"

	"github.com/gpuexec/gpuexec/internal/safepath"
)

// logFile checks the --log file's folder and returns the path to write the
// log at. The log is opened, rotated, created and removed by path at every
// write (package logfile, which follows no link, waits on no FIFO, and
// writes only into the file it opened or one its writers created), so the
// path must be one that nobody else can change: its folder is resolved as
// package safepath says (no folder on the way, and no link followed, that
// another user could move or point elsewhere), and the log's own folder
// must be this user's or root's and writable by nobody else. The file
// itself is checked by logfile.Open.
func logFile(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	dir, err := safepath.Dir(filepath.Dir(abs), 0o755, true)
	if err != nil {
		return "", fmt.Errorf("%v; keep the log in a folder only you can write", err)
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}
