//go:build windows

package cli

import (
	"os"
	"path/filepath"
)

// logFile makes the --log file's folder and returns the path to write the
// log at; the file itself is checked by logfile.Open (a regular file, not
// a link or other reparse point, a folder, or a device such as NUL or a
// named pipe). Who may write its folder is left to the folder's ACL, which
// Windows users set per folder.
func logFile(path string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	return path, nil
}
