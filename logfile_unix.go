//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gpuexec/gpuexec/internal/safepath"
)

// logFile checks the --log file and returns the path to write it at. The
// log is opened, rotated, created and removed by path at every write
// (package logfile, which follows no link and waits on no FIFO itself), so
// the path must be one that nobody else can change: its folder is resolved
// as package safepath says (no folder on the way, and no link followed,
// that another user could move or point elsewhere), and nobody but its
// owner may write the log's own folder. The file itself, if there, must be
// a regular file with no other name; it is opened once now without
// following a link or waiting (O_NOFOLLOW, O_NONBLOCK) to find out whether
// it can be written.
func logFile(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	dir, err := safepath.Dir(filepath.Dir(abs), true, true)
	if err != nil {
		return "", fmt.Errorf("%v; keep the log in a folder only you can write", err)
	}
	file := filepath.Join(dir, filepath.Base(abs))
	if fi, err := os.Lstat(file); err == nil && !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: not a regular file", file)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK) || errors.Is(err, syscall.ENXIO) {
			return "", fmt.Errorf("%s: not a regular file", file)
		}
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || (ok && st.Nlink != 1) {
		return "", fmt.Errorf("%s: not a regular file of its own (a device, a FIFO, or a file with other names)", file)
	}
	return file, nil
}
