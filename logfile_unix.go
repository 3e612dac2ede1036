//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// openLogFile opens (creating it if missing) the --log file for appending,
// refusing anything but a regular file: a symbolic link at the path is not
// followed and a FIFO or device is not waited on (O_NOFOLLOW, O_NONBLOCK,
// then fstat). lumberjack opens the file again by its path later; this
// makes a mistyped or planted --log fail at once, with one line.
func openLogFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK) {
			return nil, fmt.Errorf("%s: a symbolic link; give the log file's own path", path)
		}
		if errors.Is(err, syscall.ENXIO) {
			return nil, fmt.Errorf("%s: not a regular file", path)
		}
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return f, nil
}
