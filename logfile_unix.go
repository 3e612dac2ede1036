//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// logFile checks the --log file and returns the path to write it at: its
// folder with every symbolic link resolved. lumberjack opens, rotates and
// creates the file by path, following links and waiting on FIFOs, so the
// path must be one that nobody else can change: every folder on it is
// owned by this user or root, and none but sticky ones (such as /tmp, whose
// entries only their owner may rename) may be written by others; the
// log's own folder not even then. The file itself is opened once now,
// without following a link and without waiting (O_NOFOLLOW, O_NONBLOCK),
// and must be a regular file with no other name.
func logFile(path string) (string, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	if real, err = filepath.Abs(real); err != nil {
		return "", err
	}
	uid := uint32(os.Geteuid())
	for d, own := real, true; ; d, own = filepath.Dir(d), false {
		fi, err := os.Lstat(d)
		if err != nil {
			return "", err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || !fi.IsDir() {
			return "", fmt.Errorf("%s: not a folder", d)
		}
		if st.Uid != uid && st.Uid != 0 {
			return "", fmt.Errorf("%s belongs to another user (uid %d), who could swap the log for a link; keep the log in a folder only you can write", d, st.Uid)
		}
		if fi.Mode().Perm()&0o022 != 0 && (own || fi.Mode()&os.ModeSticky == 0) {
			return "", fmt.Errorf("%s may be written by others (%s), who could swap the log for a link; keep the log in a folder only you can write", d, fi.Mode())
		}
		if up := filepath.Dir(d); up == d {
			break
		}
	}
	file := filepath.Join(real, filepath.Base(path))
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK) {
			return "", fmt.Errorf("%s: a symbolic link; give the log file's own path", file)
		}
		if errors.Is(err, syscall.ENXIO) {
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
