package lock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
)

// maxPartialRecord is the largest content still taken for a damaged record.
// A record is a few hundred bytes.
const maxPartialRecord = 4 << 10

// partialRecord reports whether content that did not parse as a record can
// be one being written or damaged by a crash: empty, blanks or NUL bytes
// (what a power loss can leave), the start of a JSON object that is not
// complete, or a JSON object with a pid or token of the wrong type or value.
func partialRecord(content []byte) bool {
	if len(content) > maxPartialRecord {
		return false
	}
	t := bytes.Trim(content, " \t\r\n\x00")
	if len(t) == 0 {
		return true
	}
	if t[0] != '{' {
		return false
	}
	if !json.Valid(t) {
		return true
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(t, &fields) != nil {
		return false
	}
	_, pid := fields["pid"]
	_, token := fields["token"]
	return pid || token
}

// readStatus reads the lock file at path (without judging it). A missing
// file is StateFree.
func readStatus(path string) (*Status, error) {
	f, err := osfile.OpenRegular(path, false)
	if errors.Is(err, fs.ErrNotExist) {
		return &Status{Path: path, State: StateFree}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readStatusFrom(f, path)
}

// readStatusFrom reads the lock file open as f (a regular file; see
// osfile.OpenRegular) found at path.
func readStatusFrom(f *os.File, path string) (*Status, error) {
	st := &Status{Path: path}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st.recordOwner, st.ownerTold = fileOwner(fi)
	content, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return nil, err
	}
	st.Content = content
	st.ModTime = fi.ModTime()
	st.Info, err = parseRecord(content)
	if err != nil && !partialRecord(content) {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%d bytes, %v)", ErrNotLock, fi.Size(), err)}
	}
	if st.Info != nil {
		// Unknown fields are kept for status --json; a record that
		// parsed as Info is an object, so this cannot fail.
		_ = json.Unmarshal(content, &st.Fields)
	}
	return st, nil
}

// createRecord creates path with O_CREAT|O_EXCL and writes info in one
// write. It never leaves a partly written file: on any failure after the
// create, the file it created is removed.
func createRecord(path string, info *Info) error {
	var f *os.File
	err := osfile.RetrySharing(func() (err error) {
		f, err = osfile.CreateExcl(path, osfile.Shared)
		return err
	})
	if err != nil {
		return err
	}
	b := info.encode()
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// sameRecord reports whether content is the very lock that judged describes:
// same token and pid, or for a record that did not parse, the same bytes.
func sameRecord(judged *Status, content []byte) bool {
	if judged.Info == nil {
		return bytes.Equal(judged.Content, content)
	}
	got, err := parseRecord(content)
	return err == nil && got.Token == judged.Info.Token && got.PID == judged.Info.PID
}

// errChanged reports that the lock file was replaced between judging and
// removing it; it was left in place.
var errChanged = errors.New("lock file changed while it was being removed")

// removeIfSame removes the lock at path only if it is still the lock that
// judged describes. It never removes by path after inspecting: it renames
// the file aside to a unique name, re-reads what it moved, and deletes it
// only if it is the same lock; otherwise it puts it back without replacing
// anything created at the path meanwhile. A lock that is already gone is not
// an error (someone else cleared it first). Every removal of a lock goes
// through here or setAside (stale clearing, clear, release): keep them the
// only ones.
func removeIfSame(path string, judged *Status) error {
	aside, err := setAside(path, judged)
	if err != nil {
		return err
	}
	return deleteSetAside(aside)
}

// deleteSetAside deletes the lock file setAside moved to aside; "" is none.
// One already gone is no error: after a release lets go of the guard, the
// next holder's sweep may find it first where it cannot see this process
// alive (another pid namespace sharing the folder).
func deleteSetAside(aside string) error {
	if aside == "" {
		return nil
	}
	err := osfile.RetrySharing(func() error { return os.Remove(aside) })
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// setAside is removeIfSame's first half: it renames the lock at path aside
// if it is still the lock that judged describes, returning where it now is
// ("" if it was already gone), for the caller to delete. The path is free
// from then on; the file set aside carries this process's pid in its name
// ("<lock>.stale-PID-xxxxxx"), which sweep leaves alone while this process
// lives and removes after. A release deletes it once it has let go of the
// guard, so that the next holder does not wait for the deletion.
func setAside(path string, judged *Status) (aside string, err error) {
	aside = fmt.Sprintf("%s.stale-%d-%06x", path, os.Getpid(), rand.Uint32N(1<<24))
	if err := osfile.RetrySharing(func() error { return os.Rename(path, aside) }); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	content, err := readAllLimited(aside)
	if err == nil && sameRecord(judged, content) {
		return aside, nil
	}
	if perr := osfile.RetrySharing(func() error { return osfile.RenameNoReplace(aside, path) }); perr != nil {
		// A process outside the guard (the seed's Node tool) created a
		// lock while another one was set aside. Ours must not replace
		// theirs; the one set aside is lost either way.
		os.Remove(aside)
		return "", fmt.Errorf("%w; could not put it back: %v", errChanged, perr)
	}
	return "", errChanged
}

// readAllLimited reads at most maxRecordSize+1 bytes of the regular file
// at path.
func readAllLimited(path string) ([]byte, error) {
	f, err := osfile.OpenRegular(path, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxRecordSize+1))
}

// replaceRecord atomically replaces the content of the lock at path with
// info (write a temporary file, rename it over the lock). Readers see the
// old record or the new one, never a partial one.
func replaceRecord(path string, info *Info) error {
	tmp := fmt.Sprintf("%s.tmp-%d-%06x", path, os.Getpid(), rand.Uint32N(1<<24))
	if err := createRecord(tmp, info); err != nil {
		return err
	}
	if err := osfile.RetrySharing(func() error { return os.Rename(tmp, path) }); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// lockNew takes the exclusive kernel lock of a file this process has just
// created (O_EXCL). Nobody holds it but, for microseconds, a judge that
// probes it (ticketAlive, probeLiveFile: status, a waiting line, a waiter
// following the queue); a busy lock is tried again for up to newLockWait
// before it is an error, so that a probe never makes a waiter fail.
func lockNew(f *os.File, what string) error {
	deadline := time.Now().Add(newLockWait)
	for {
		ok, err := osfile.TryLock(f)
		switch {
		case err != nil:
			return err
		case ok:
			return nil
		case time.Now().After(deadline):
			return errors.New(what + " locked by another process")
		}
		time.Sleep(newLockPause)
	}
}

// A probe holds a lock for microseconds; one held for longer than
// newLockWait is another process's for real (or a prober stopped
// mid-probe).
const (
	newLockWait  = 200 * time.Millisecond
	newLockPause = 200 * time.Microsecond
)
