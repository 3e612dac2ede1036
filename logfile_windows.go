//go:build windows

package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// logFile checks the --log file and returns the path to write it at: it
// must be a regular file (not a link or other reparse point, a folder, or
// a device such as NUL or a named pipe). Who may write its folder is left
// to the folder's ACL, which Windows users set per folder.
func logFile(path string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: not a regular file", path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: not a regular file", path)
	}
	return path, nil
}
