// Package logfile is a log file that several processes append to at once
// and that is rotated by size, once, whichever process finds it full:
// gpuexec's --log, which every job of a crontab names.
//
// lumberjack, which gpuexec used before, is single-process by its own
// documentation: each process keeps the file open and counts its own
// writes, so with several writers each one rotates the file when its count
// reaches the limit (several rotations in a row, backups cut short), and
// the others go on writing into the file renamed away. Even under the lock
// below, its rotation renames over a backup made in the same millisecond
// and makes the fresh file by name, following a link put there meanwhile
// (measured: docs/performance.md), so the rotation is done here. Every write
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
//
// Nothing here waits without a bound or writes where it should not: the
// sidecar is its owner's alone (0600), so nobody else can take its lock,
// and a write waits for it at most LockWait (ErrBusy); the log is never
// followed if a link nor waited on if a FIFO, and a file found in its place
// is never written (ErrReplaced); a record cut short (a full disk) is
// taken back; a rotation that cannot be done is said (Options.RotateFailed)
// and never retried in a loop. What to tell the user is the caller's.
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

	"github.com/gpuexec/gpuexec/internal/osfile"
)

// LockSuffix names the sidecar whose kernel lock the writers take: "<log>.lock".
// It is created beside the log, for its owner alone (0600), and left there;
// it holds the identity of the file the log is now (see File), no more.
const LockSuffix = ".lock"

// LockWait bounds how long a Write waits for the sidecar's lock. Writers
// hold it for one append (and now and then a rotation), microseconds: a
// wait this long means that a writer is stopped, or that some other program
// holds the lock, and gpuexec must not keep a GPU waiting on its log. Long
// enough for any number of cron jobs writing at once on a loaded machine.
const LockWait = 1500 * time.Millisecond

// maxBackupTries bounds the search for a free rotated name: one a
// millisecond after the other (a second of rotations).
const maxBackupTries = 1000

// backupTimeFormat is lumberjack's: the rotation time in a rotated file's
// name.
const backupTimeFormat = "2006-01-02T15-04-05.000"

// ErrBusy is the error (errors.Is) of a Write that could not take the
// sidecar's lock within LockWait. The File is given up: that Write and
// every later one fail with it, and nothing more is written.
var ErrBusy = errors.New("its lock is held by another process")

// ErrReplaced is the error (errors.Is) of a Write that found at the log's
// path a file that is not the log: another file renamed or linked there
// (not the one first opened, nor one that a writer of this log created
// when it rotated it), a file with other names (a hard link), or a link,
// folder or device. Nothing is written into it; the File is given up: that
// Write and every later one fail with it.
var ErrReplaced = errors.New("the file there is not the log")

// errNotRegular is what openFile says of anything but a regular file.
var errNotRegular = osfile.ErrNotRegular

// openFile opens the file at path with flag, creating it with perm (as the
// umask has it) if flag says so, and returns it with its state. It never
// follows a link at path nor waits on a FIFO; anything but a regular file
// is errNotRegular. On Windows O_APPEND is kept by moving to the end at the
// open, so that File.Write can take back a record cut short: the log is
// written only under the sidecar's lock, so its end stays its end.
func openFile(path string, flag int, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	f, fi, err := osfile.OpenFile(path, flag, perm)
	if errors.Is(err, errNotRegular) {
		return nil, nil, fmt.Errorf("%s: %w", path, errNotRegular)
	}
	return f, fi, err
}

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
	// RotateFailed, if set, is told why a rotation that was due could not
	// be done (no free rotated name, a name too long for the file system,
	// on Windows another program holding the file): the record is then
	// appended to the full file, and the next write tries again. It is
	// called with the sidecar locked, from Write, and must not write to
	// this File.
	RotateFailed func(error)
}

// File is a log file opened for appending by any number of processes. Its
// methods are safe for concurrent use. Each Write is one record (a log
// line): it lands whole, after every record written before it by any
// process, in one file, or not at all.
//
// The log is opened by name for each record; a File writes only into the
// file it first opened, or into one that a writer of this log (any process,
// under the sidecar's lock) created in its place when it rotated it, which
// that writer names in the sidecar. Any other file found at the path is
// ErrReplaced.
type File struct {
	path string
	o    Options
	mu   sync.Mutex
	lk   *os.File // the sidecar; nil once closed or given up
	gone error    // why the File was given up (ErrBusy, ErrReplaced)
	id   string   // the identity of the log as last found (see identity)
	perm fs.FileMode
}

// Open opens the log at path, creating it and its sidecar if missing. path
// must name a regular file with no other name, or nothing; it is never
// followed if it is a symbolic link, nor waited on if it is a FIFO. The
// sidecar, if there, must be the caller's own: it is tightened to its owner
// alone if others may open it. The folder must exist. If the sidecar's lock
// cannot be had within LockWait, the File returned is given up already:
// its first Write says ErrBusy.
func Open(path string, o Options) (*File, error) {
	// The log first, so that a refused one leaves no sidecar behind. One
	// missing is made below, under the lock, and named in the sidecar for
	// the other writers (see openLog).
	out, fi, err := openFile(path, os.O_WRONLY|os.O_APPEND, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case errors.Is(err, errNotRegular):
		return nil, fmt.Errorf("%s: not a regular file (a link, a folder or a device)", path)
	case err != nil:
		return nil, err
	default:
		_, links, err := identity(out, fi)
		out.Close()
		if err != nil {
			return nil, err
		}
		if links != 1 {
			return nil, fmt.Errorf("%s: not a file of its own (it has %d names)", path, links)
		}
	}
	lk, err := openSidecar(path + LockSuffix)
	if err != nil {
		return nil, err
	}
	f := &File{path: path, o: o, lk: lk, perm: 0o644}
	if err := lockSidecar(lk); err != nil {
		if errors.Is(err, ErrBusy) { // lk is closed for us (see lockWithin)
			f.lk, f.gone = nil, err
			return f, nil
		}
		lk.Close()
		return nil, err
	}
	out, _, err = f.openLog(true)
	unlockFile(lk)
	if err != nil {
		lk.Close()
		if errors.Is(err, ErrReplaced) {
			return nil, fmt.Errorf("%s changed while it was opened: %w", path, err)
		}
		return nil, err
	}
	out.Close()
	return f, nil
}

// Path is the log's path.
func (f *File) Path() string { return f.path }

// Write appends p, one record, to the log, rotating it first if p would
// take it past Options.MaxSize. A rotation that cannot be done is told to
// Options.RotateFailed and the record appended to the full file. A record
// cut short (a full disk) is taken back: the file is truncated to its size
// before the write, n is 0 and the error says why. ErrBusy and ErrReplaced
// give the File up (see them).
func (f *File) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone != nil {
		return 0, f.gone
	}
	if f.lk == nil {
		return 0, os.ErrClosed
	}
	n, err := f.write(p)
	switch {
	case errors.Is(err, ErrBusy):
		// The sidecar is closed for us once a lock had late is let go
		// (see lockWithin).
		f.lk, f.gone = nil, err
	case errors.Is(err, ErrReplaced):
		f.lk.Close()
		f.lk, f.gone = nil, err
	}
	return n, err
}

// lockSidecar takes the sidecar lk's lock within LockWait; the error says
// which file, and ErrBusy how long it waited. On ErrBusy lk is no longer
// the caller's (see lockWithin).
func lockSidecar(lk *os.File) error {
	err := lockWithin(lk, LockWait)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrBusy):
		return fmt.Errorf("%s: %w for over %s", lk.Name(), err, LockWait)
	}
	return fmt.Errorf("locking %s: %w", lk.Name(), err)
}

// write is Write with f.mu held and f open.
func (f *File) write(p []byte) (int, error) {
	if err := lockSidecar(f.lk); err != nil {
		return 0, err
	}
	defer unlockFile(f.lk)
	out, size, err := f.openLog(false)
	if err != nil {
		return 0, err
	}
	if f.o.MaxSize > 0 && size > 0 && size+int64(len(p)) > f.o.MaxSize {
		if out, size, err = f.rotate(out); err != nil {
			return 0, err
		}
	}
	defer out.Close()
	n, err := out.Write(p)
	if err == nil {
		return n, nil
	}
	err = fmt.Errorf("writing %s: %w", f.path, err)
	if n > 0 {
		if terr := out.Truncate(size); terr != nil {
			return n, fmt.Errorf("%w; %d bytes of a record stay at its end: %w", err, n, terr)
		}
	}
	return 0, err
}

// Close lets go of the sidecar. Later writes fail with os.ErrClosed (or
// with the error that gave the File up).
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

// openLog opens the log by name for appending and returns it with its
// size, creating it if missing. Call with the sidecar locked. A file there
// that is not the log (see File; on the first open, any regular file with
// one name is) is ErrReplaced.
func (f *File) openLog(first bool) (*os.File, int64, error) {
	out, fi, err := openFile(f.path, os.O_WRONLY|os.O_APPEND, 0)
	created := false
	if errors.Is(err, fs.ErrNotExist) {
		// Removed, or just rotated: a file created here now, under the
		// lock, is the log.
		out, fi, err = openFile(f.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, f.perm)
		created = true
	}
	if errors.Is(err, errNotRegular) {
		return nil, 0, fmt.Errorf("%s: %w (a link, a folder or a device: %w)", f.path, ErrReplaced, errNotRegular)
	}
	if err != nil {
		return nil, 0, err
	}
	id, links, err := identity(out, fi)
	if err != nil {
		out.Close()
		return nil, 0, err
	}
	switch {
	case created:
		f.record(id)
	case links != 1:
		out.Close()
		return nil, 0, fmt.Errorf("%s: %w (it has %d names)", f.path, ErrReplaced, links)
	case !first && id != f.id && id != f.recorded():
		out.Close()
		return nil, 0, fmt.Errorf("%s: %w (another file was put in its place)", f.path, ErrReplaced)
	}
	f.id, f.perm = id, fi.Mode().Perm()
	return out, fi.Size(), nil
}

// record names id in the sidecar as the log's file now, for the other
// writers' openLog. Call with the sidecar locked. Should it fail, the
// other writers find a file they do not know and give the log up: they
// write into nothing but the log.
func (f *File) record(id string) {
	b := []byte(id + "\n")
	if _, err := f.lk.WriteAt(b, 0); err == nil {
		f.lk.Truncate(int64(len(b)))
	}
}

// recorded is the identity the sidecar names ("" if none). Call with the
// sidecar locked.
func (f *File) recorded() string {
	var b [128]byte
	n, _ := f.lk.ReadAt(b[:], 0)
	s, ok := strings.CutSuffix(string(b[:n]), "\n")
	if !ok {
		return ""
	}
	return s
}

// rotate renames the full log (open as out) to a backup name and returns
// the fresh log open for appending, with its size, then removes the
// backups that are too many or too old. Call with the sidecar locked. If
// it cannot be renamed, Options.RotateFailed is told why and the full log
// is returned.
func (f *File) rotate(out *os.File) (*os.File, int64, error) {
	out.Close() // Windows renames no file open without FILE_SHARE_DELETE
	backup, err := f.freeBackupName(time.Now())
	if err == nil {
		err = os.Rename(f.path, backup)
	}
	if err != nil {
		if f.o.RotateFailed != nil {
			f.o.RotateFailed(err)
		}
		return f.openLog(false)
	}
	fresh, size, err := f.openLog(false)
	if err != nil {
		return nil, 0, err
	}
	f.prune(time.Now())
	return fresh, size, nil
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
// sidecar's lock rotates, so the name stays free until it is used.) It
// gives up on any error but "no such file" (a name too long for the file
// system), and after maxBackupTries names taken.
func (f *File) freeBackupName(t time.Time) (string, error) {
	for range maxBackupTries {
		name := backupName(f.path, t)
		_, err := os.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return name, nil
		}
		if err != nil {
			return "", err
		}
		t = t.Add(time.Millisecond)
	}
	return "", fmt.Errorf("%s: %d rotated names in a row are taken", f.path, maxBackupTries)
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

// Rotated lists the rotated files of the log at path, newest first: the
// regular files beside it named as a rotation names them (see backupName).
func Rotated(path string) ([]string, error) {
	list, err := (&File{path: path}).backups()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(list))
	for i, b := range list {
		out[i] = b.path
	}
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

// RotatedName is the name a file at path rotated at t gets, as a rotation
// here names it (and Rotated lists it): the first free one from t on, a
// millisecond apart. For other files rotated by their own writers under
// their own lock (the job journal), so that Rotated finds theirs too.
func RotatedName(path string, t time.Time) (string, error) {
	return (&File{path: path}).freeBackupName(t)
}

// Prune removes the rotated files of the file at path beyond the keep
// newest (see RotatedName); keep 0 removes none. Call it where only one
// process rotates at a time (under the file's own lock).
func Prune(path string, keep int) {
	(&File{path: path, o: Options{MaxBackups: keep}}).prune(time.Now())
}

// Identity is what tells the open file f, whose state is fi, from any
// other while it exists (its device and inode on Unix, its volume and file
// index on Windows), and how many names it has.
func Identity(f *os.File, fi fs.FileInfo) (id string, links uint64, err error) {
	return identity(f, fi)
}
