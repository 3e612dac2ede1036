package lock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
)

// guardSuffix names the sidecar file, beside the lock file, on which gpuexec
// processes take a kernel lock (flock / LockFileEx) while they judge, clear,
// create, touch or remove the lock file. It serializes those steps among
// gpuexec processes, closing the seed's window in which a lock set aside as
// stale is put back over a lock created meanwhile; the kernel drops it when
// its holder dies. The sidecar is permanent and holds nothing: deleting it
// while no gpuexec runs is harmless. The lock file itself stays the seed's,
// so processes that know nothing of the sidecar still exclude gpuexec.
const guardSuffix = ".guard"

// Where the guard cannot be waited for in the kernel (Windows; see
// osfile.WaitLock), the pause between tries starts at guardFirstRetry and
// doubles up to guardRetry. The guard is held for a few system calls at a
// time (tens of microseconds), so the first tries come quickly: a waiter
// woken by a release meets the releaser still holding it. On Unix a try
// comes again only if the sidecar was replaced while it was waited for.
const (
	guardFirstRetry = 50 * time.Microsecond
	guardRetry      = 2 * time.Millisecond
)

// guard is a held kernel lock on the sidecar file. writable says whether
// this process could open it for writing (see osfile.OpenGuard).
type guard struct {
	f        *os.File
	writable bool
}

// guards counts the guards this process holds, so that Suspend can stop
// it at a moment when it holds none.
var guards struct {
	mu        sync.Mutex
	cond      *sync.Cond
	held      int
	suspended bool
}

func init() { guards.cond = sync.NewCond(&guards.mu) }

// suspend runs stop — which stops this process, as a SIGSTOP to itself
// does — at a moment when the process holds no guard, and lets it take
// none until stop returns (the process was continued). A process stopped
// while it holds a guard (a few system calls at a time) would make every
// other process of the lock wait for it.
func suspend(stop func()) {
	guards.mu.Lock()
	guards.suspended = true
	for guards.held > 0 {
		guards.cond.Wait()
	}
	guards.mu.Unlock()
	stop()
	guards.mu.Lock()
	guards.suspended = false
	guards.cond.Broadcast()
	guards.mu.Unlock()
}

// countGuard counts a guard just taken, reporting false (the caller lets
// go of it and waits) while the process is being suspended, but for an
// inner guard (see takeInnerGuard).
func countGuard(inner bool) bool {
	guards.mu.Lock()
	defer guards.mu.Unlock()
	if guards.suspended && !inner {
		return false
	}
	guards.held++
	return true
}

// awaitResume blocks while the process is being suspended.
func awaitResume() {
	guards.mu.Lock()
	for guards.suspended {
		guards.cond.Wait()
	}
	guards.mu.Unlock()
}

// takeGuard blocks until it holds the sidecar lock of the lock at path, or
// ctx ends.
func takeGuard(ctx context.Context, path string) (*guard, error) { return lockGuard(ctx, path, false) }

// takeInnerGuard is takeGuard for a guard taken while this process holds
// another (a device's, under the queue's): it does not wait for a suspend,
// which itself waits for the outer guard to go, so that the two never wait
// for each other.
func takeInnerGuard(ctx context.Context, path string) (*guard, error) {
	return lockGuard(ctx, path, true)
}

func lockGuard(ctx context.Context, path string, inner bool) (*guard, error) {
	gpath := path + guardSuffix
	var wait *time.Timer
	delay := guardFirstRetry
	for {
		f, writable, err := osfile.OpenGuard(gpath)
		if err != nil {
			return nil, err
		}
		ok, err := osfile.TryLock(f)
		if err == nil && !ok {
			// Held: wait for it in the kernel where that is possible.
			var gaveUp bool
			if ok, gaveUp, err = osfile.WaitLock(ctx, f); gaveUp {
				return nil, err // f is osfile.WaitLock's now
			}
		}
		if err != nil {
			f.Close()
			return nil, &fs.PathError{Op: "lock", Path: gpath, Err: err}
		}
		if ok {
			// The sidecar may have been deleted and re-created while we
			// opened it: only a lock on the file now at the path counts.
			held, herr := f.Stat()
			now, nerr := os.Stat(gpath)
			if herr == nil && nerr == nil && os.SameFile(held, now) {
				if countGuard(inner) {
					return &guard{f: f, writable: writable}, nil
				}
				// Being suspended: let go, and try again after.
				osfile.Unlock(f)
				f.Close()
				awaitResume()
				continue
			}
			osfile.Unlock(f)
		}
		f.Close()
		if wait == nil {
			wait = time.NewTimer(delay)
			defer wait.Stop()
		} else {
			wait.Reset(delay)
		}
		delay = min(2*delay, guardRetry)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait.C:
		}
	}
}

// release drops the guard. Closing the file drops the kernel lock too; the
// explicit unlock only makes it prompt.
func (g *guard) release() {
	if g == nil {
		return
	}
	osfile.Unlock(g.f)
	g.f.Close()
	guards.mu.Lock()
	guards.held--
	guards.cond.Broadcast()
	guards.mu.Unlock()
}

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

// sameLock reports whether content is the very lock that judged describes:
// same token and pid, or for a record that did not parse, the same bytes.
func sameLock(judged *Status, content []byte) bool {
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
	tomb, err := setAside(path, judged)
	if err != nil {
		return err
	}
	return deleteSetAside(tomb)
}

// deleteSetAside deletes the lock file setAside moved to tomb; "" is none.
// One already gone is no error: after a release lets go of the guard, the
// next holder's sweep may find it first where it cannot see this process
// alive (another pid namespace sharing the folder).
func deleteSetAside(tomb string) error {
	if tomb == "" {
		return nil
	}
	err := osfile.RetrySharing(func() error { return os.Remove(tomb) })
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
func setAside(path string, judged *Status) (tomb string, err error) {
	tomb = fmt.Sprintf("%s.stale-%d-%06x", path, os.Getpid(), rand.Uint32N(1<<24))
	if err := osfile.RetrySharing(func() error { return os.Rename(path, tomb) }); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	content, err := readAllLimited(tomb)
	if err == nil && sameLock(judged, content) {
		return tomb, nil
	}
	if perr := osfile.RetrySharing(func() error { return osfile.RenameNoReplace(tomb, path) }); perr != nil {
		// A process outside the guard (the seed's Node tool) created a
		// lock while another one was set aside. Ours must not replace
		// theirs; the one set aside is lost either way.
		os.Remove(tomb)
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
