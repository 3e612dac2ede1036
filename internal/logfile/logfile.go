// Package logfile is a log file that several processes append to at once
// and that is rotated by size, once, whichever process finds it full:
// gpuexec's --log, which every job of a crontab names.
//
// lumberjack, which gpuexec used before, is single-process by its own
// documentation: each process keeps the file open and counts its own
// writes, so with several writers each one rotates the file when its count
// reaches the limit (several rotations in a row, backups cut short), and
// the others go on writing into the file renamed away. Here every write
// takes a kernel lock on a sidecar file beside the log (flock on Unix,
// LockFileEx on Windows), opens the log by name, rotates it if the write
// would take it past the limit, writes the record with one append, closes
// it and lets the lock go. The size is read from the file itself under the
// lock, so it is rotated exactly once at the limit, by whoever writes the
// record that would not fit; no line is lost or split, and no file is kept
// open between writes (Windows cannot rename a file another process holds
// open).
//
// Rotated files are named as lumberjack names them, so that tools and
// habits built on its names keep working: gpuexec.log becomes
// gpuexec-2026-10-12T20-18-03.000.log (the time of the rotation, UTC).
package logfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Options say when the file is rotated and how many rotated files are kept.
type Options struct {
	// MaxSize is the most bytes the file holds: a write that would take it
	// past MaxSize rotates it first (a record larger than MaxSize is
	// written alone into a fresh file). 0 never rotates.
	MaxSize int64
	// MaxBackups is how many rotated files are kept, the newest; 0 keeps
	// all.
	MaxBackups int
	// MaxAge removes rotated files older than this (by the time in their
	// name); 0 keeps them whatever their age.
	MaxAge time.Duration
}

// LockSuffix names the sidecar whose kernel lock the writers of a log
// take: "<log>.lock". It is created beside the log, empty, and left there.
const LockSuffix = ".lock"

// backupTimeFormat is lumberjack's: the rotation time in a rotated file's
// name.
const backupTimeFormat = "2006-01-02T15-04-05.000"

// File is a log file opened for appending by any number of processes. Its
// methods are safe for concurrent use. Each Write is one record (a log
// line): it lands whole, after every record written before it by any
// process, in one file.
type File struct {
	path string
	o    Options
	mu   sync.Mutex
	lk   *os.File // the sidecar; nil once closed
}

// Open opens the log at path, creating it and its sidecar if missing. path
// must name a regular file or nothing; it is never followed if it is a
// symbolic link (see openAppend). The folder must exist.
func Open(path string, o Options) (*File, error) {
	lk, err := openSidecar(path + LockSuffix)
	if err != nil {
		return nil, err
	}
	f, _, err := openAppend(path, 0o644)
	if err != nil {
		lk.Close()
		return nil, err
	}
	f.Close()
	return &File{path: path, o: o, lk: lk}, nil
}

// Path is the log's path.
func (f *File) Path() string { return f.path }

// Write appends p, one record, to the log, rotating it first if p would
// take it past Options.MaxSize. A rotation that fails (on Windows, another
// program holding the file open without sharing its deletion) is given up
// and the record appended to the full file; the next write tries again.
func (f *File) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lk == nil {
		return 0, os.ErrClosed
	}
	if err := lockFile(f.lk); err != nil {
		return 0, fmt.Errorf("logfile: locking %s: %w", f.lk.Name(), err)
	}
	defer unlockFile(f.lk)
	out, fi, err := openAppend(f.path, 0o644)
	if err != nil {
		return 0, err
	}
	if f.o.MaxSize > 0 && fi.Size() > 0 && fi.Size()+int64(len(p)) > f.o.MaxSize {
		out, err = f.rotate(out, fi)
		if err != nil {
			return 0, err
		}
	}
	n, err := out.Write(p)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// Close lets go of the sidecar. Later writes fail with os.ErrClosed.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lk == nil {
		return nil
	}
	err := f.lk.Close()
	f.lk = nil
	return err
}

// rotate renames the full log (open as out, stat fi) to a backup name and
// returns the fresh log open for appending, then removes the backups that
// are too many or too old. Call with the sidecar locked. If the rename
// fails, the full log is returned, open.
func (f *File) rotate(out *os.File, fi fs.FileInfo) (*os.File, error) {
	out.Close()
	backup := f.freeBackupName(time.Now())
	if err := os.Rename(f.path, backup); err != nil {
		full, _, err := openAppend(f.path, fi.Mode().Perm())
		return full, err
	}
	fresh, _, err := openAppend(f.path, fi.Mode().Perm())
	if err != nil {
		return nil, err
	}
	f.prune(time.Now())
	return fresh, nil
}

// backupName is the name the log gets when rotated at t, as lumberjack
// names it: the name before its extension, a dash, the UTC time, the
// extension.
func backupName(path string, t time.Time) string {
	dir, name := filepath.Split(path)
	ext := filepath.Ext(name)
	return filepath.Join(dir, strings.TrimSuffix(name, ext)+"-"+t.UTC().Format(backupTimeFormat)+ext)
}

// freeBackupName is backupName at t, or at the first millisecond after it
// that names no file: two rotations within one millisecond must not make
// the second overwrite the first's backup. (Only a process holding the
// sidecar's lock rotates, so the name stays free until it is used.)
func (f *File) freeBackupName(t time.Time) string {
	for {
		name := backupName(f.path, t)
		if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
			return name
		}
		t = t.Add(time.Millisecond)
	}
}

// backup is a rotated file found beside the log.
type backup struct {
	path string
	at   time.Time
}

// backups lists the log's rotated files, newest first: regular files in
// its folder named as backupName names them.
func (f *File) backups() ([]backup, error) {
	dir, name := filepath.Split(f.path)
	ext := filepath.Ext(name)
	prefix := strings.TrimSuffix(name, ext) + "-"
	ents, err := os.ReadDir(filepath.Clean(dir))
	if err != nil {
		return nil, err
	}
	var out []backup
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(n, prefix) || !strings.HasSuffix(n, ext) || len(n) < len(prefix)+len(ext) {
			continue
		}
		t, err := time.Parse(backupTimeFormat, n[len(prefix):len(n)-len(ext)])
		if err != nil {
			continue
		}
		out = append(out, backup{path: filepath.Join(dir, n), at: t})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.After(out[j].at) })
	return out, nil
}

// prune removes the rotated files beyond Options.MaxBackups and those older
// than Options.MaxAge at now. Call with the sidecar locked.
func (f *File) prune(now time.Time) {
	if f.o.MaxBackups <= 0 && f.o.MaxAge <= 0 {
		return
	}
	list, err := f.backups()
	if err != nil {
		return
	}
	for i, b := range list {
		if f.o.MaxBackups > 0 && i >= f.o.MaxBackups || f.o.MaxAge > 0 && now.Sub(b.at) > f.o.MaxAge {
			os.Remove(b.path)
		}
	}
}
