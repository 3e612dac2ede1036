//go:build windows

package main

import (
	"fmt"
	"os"
)

// openLogFile opens (creating it if missing) the --log file for appending,
// refusing anything but a regular file (a link or other reparse point, a
// folder, a device such as NUL or a named pipe).
func openLogFile(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return f, nil
}
