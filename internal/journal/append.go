package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/gpuexec/gpuexec/internal/logfile"
	"github.com/gpuexec/gpuexec/internal/osfile"
)

// Bounds of the writing side.
const (
	// MaxSize is the most bytes a journal holds: a line that would take
	// it past MaxSize rotates it first.
	MaxSize = 16 << 20
	// Keep is how many rotated files are kept beside it, the newest.
	Keep = 10
	// AppendWait bounds how long Append waits for the journal's kernel
	// lock, all tries together. Writers hold it for one write (now and
	// then a rotation): a wait this long means that a writer is stopped,
	// or that some other program of the folder's group holds the lock,
	// and a job must not be kept on its journal.
	AppendWait = 1500 * time.Millisecond
)

// Errors of Append (errors.Is).
var (
	// ErrBusy: the journal's lock could not be had within AppendWait.
	// Nothing was written.
	ErrBusy = errors.New("its lock is held by another process")
	// ErrTooLong: the record, as a line, is longer than MaxLine even
	// with its Argv cut. Nothing was written.
	ErrTooLong = errors.New("the record is longer than a journal line may be")
	// ErrNotRotated: the journal was full but could not be rotated (its
	// folder not writable, a rotated name taken): the line WAS written,
	// into the full file.
	ErrNotRotated = errors.New("the journal is full and could not be rotated")
)

// appendTries bounds the rounds of one Append: each is lost only to a
// rotation or a removal of the journal by another writer in between.
const appendTries = 64

// Line is r as the journal line Append writes: its Argv cut (CutArgv,
// Record.Cut), checked (Record.Validate), one JSON object and a newline,
// no longer than MaxLine: an Argv that JSON writes longer than that (a
// byte may take six: "<" is \u003c) is cut further, each argument to half
// as many bytes until it fits; a record too long without its Argv is
// ErrTooLong.
func Line(r Record) ([]byte, error) {
	argv, cut := CutArgv(r.Argv)
	r.Argv, r.Cut = argv, r.Cut || cut
	if err := r.Validate(); err != nil {
		return nil, err
	}
	for most := MaxArg / 2; ; most /= 2 {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		if len(b) <= MaxLine {
			return append(b, '\n'), nil
		}
		if len(r.Argv) == 0 {
			return nil, fmt.Errorf("%w (%d bytes)", ErrTooLong, len(b))
		}
		if most == 0 {
			r.Argv = nil
		} else {
			r.Argv, _ = cutEach(r.Argv, most)
		}
		r.Cut = true
	}
}

// Append writes r as one line (see Line) at the end of the journal at
// path, creating it if missing, rotating it first if the line would take
// it past MaxSize (the rotated file named as package logfile names a
// rotated log, so that Load and logfile.Rotated find it; the Keep newest
// kept).
//
// Any number of processes, of any member of the folder's group, may
// append at once: every line is written whole with one write under an
// exclusive kernel lock on the journal itself (flock on Unix, LockFileEx
// on a byte far past its content on Windows), after every line written
// before it, into the file at path at that moment (a writer that took the
// lock of a file rotated away meanwhile lets it go and tries the new
// one). Only the writer holding the lock rotates, so a journal is rotated
// once. The lock is had within AppendWait or not at all (ErrBusy): a job
// is never kept waiting on its journal for longer.
//
// The journal is never followed if a symbolic link, never waited on if a
// FIFO or a device, and anything but a regular file with one name is
// refused (osfile.ErrNotRegular) and left as it is. A new journal is
// created as the lock's shared files are (osfile.CreateExcl, Joined): in a
// group folder (setgid, group-writable) 0660 in the folder's group, in a
// folder only its owner may write 0600, in a sticky folder every user may
// write (/tmp) 0666; a folder the lock refuses (osfile.FolderRule) gets
// none. A line cut short (a full disk) is taken back.
func Append(path string, r Record) error {
	line, err := Line(r)
	if err != nil {
		return err
	}
	return appendLine(path, line, time.Now().Add(AppendWait))
}

// appendLine is Append of a line made, with the lock had before deadline.
func appendLine(path string, line []byte, deadline time.Time) error {
	for range appendTries {
		f, err := openJournal(path)
		if err != nil {
			return err
		}
		if err := lockBefore(f, deadline); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		done, err := writeLocked(f, path, line)
		osfile.Unlock(f)
		f.Close()
		if done || err != nil {
			return err
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%s: %w for over %s", path, ErrBusy, AppendWait)
		}
	}
	return fmt.Errorf("%s: rotated or removed %d times while it was written", path, appendTries)
}

// openJournal opens the journal at path for writing, creating it if
// missing (see Append).
func openJournal(path string) (*os.File, error) {
	for range appendTries {
		f, _, err := osfile.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
		f, err = osfile.CreateExcl(path, osfile.Joined)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
		// Created by another writer in between: open that one.
	}
	return nil, fmt.Errorf("%s: created and removed %d times while it was opened", path, appendTries)
}

// lockBefore takes the exclusive kernel lock on f, waiting until deadline
// at most (ErrBusy). On an error f is no longer the caller's: it is
// closed (at once, or once a wait given up ends).
func lockBefore(f *os.File, deadline time.Time) error {
	ok, err := osfile.TryLock(f)
	if ok {
		return nil
	}
	if err != nil {
		f.Close()
		return err
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	ok, gaveUp, err := osfile.WaitLock(ctx, f)
	for {
		switch {
		case ok:
			return nil
		case gaveUp:
			return fmt.Errorf("%w for over %s", ErrBusy, AppendWait)
		case err != nil:
			f.Close()
			return err
		}
		// No wait in the kernel that can be given up (Windows): try
		// again every lockPoll until the deadline.
		select {
		case <-ctx.Done():
			f.Close()
			return fmt.Errorf("%w for over %s", ErrBusy, AppendWait)
		case <-time.After(lockPoll):
		}
		ok, err = osfile.TryLock(f)
	}
}

// lockPoll is how often lockBefore tries the lock where the OS cannot wait
// for it with a bound (Windows).
const lockPoll = 5 * time.Millisecond

// writeLocked writes line into the journal open as f, locked, if f is
// still the file at path and has room for it; done=false says to try
// again: f was rotated or removed meanwhile, or has just been rotated.
func writeLocked(f *os.File, path string, line []byte) (done bool, err error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !os.SameFile(fi, now) {
		return false, nil // rotated or removed by the writer before
	}
	if err != nil {
		return false, err
	}
	_, links, err := logfile.Identity(f, fi)
	if err != nil {
		return false, err
	}
	if links != 1 {
		return false, &fs.PathError{Op: "append", Path: path, Err: fmt.Errorf("%w: it has %d names", osfile.ErrNotRegular, links)}
	}
	var rotErr error
	if size := fi.Size(); size > 0 && size+int64(len(line)) > MaxSize {
		if rotErr = rotate(path); rotErr == nil {
			return false, nil // the line goes into the fresh file
		}
	}
	// O_APPEND on Unix; on Windows the end, which stays the end under
	// the lock (every writer takes it).
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return false, err
	}
	n, err := f.Write(line)
	if err != nil {
		err = fmt.Errorf("writing %s: %w", path, err)
		if n > 0 {
			if terr := f.Truncate(size); terr != nil {
				return false, fmt.Errorf("%w; %d bytes of a line stay at its end: %w", err, n, terr)
			}
		}
		return false, err
	}
	if rotErr != nil {
		return true, fmt.Errorf("%s: %w: %w", path, ErrNotRotated, rotErr)
	}
	return true, nil
}

// rotate renames the full journal at path to its rotated name and removes
// the rotated files beyond Keep. Call it holding the journal's lock.
func rotate(path string) error {
	name, err := logfile.RotatedName(path, time.Now())
	if err != nil {
		return err
	}
	if err := osfile.RenameNoReplace(path, name); err != nil {
		return err
	}
	logfile.Prune(path, Keep)
	return nil
}
