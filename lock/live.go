package lock

import (
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
)

// liveSuffix names a holder's liveness file: "<lock>.live-<token>". The
// holder takes an exclusive kernel lock (flock / LockFileEx) on it before it
// creates the lock record and keeps it until after the record is removed;
// its job inherits the open file, so the kernel lock stays held exactly as
// long as any process of the job that inherited it lives. A waiter that can
// take a shared lock on it knows, without trusting a pid, that the holder
// and its job are gone. Records without a liveness file (the seed's Node
// tool) are judged by pid and heartbeat.
const liveSuffix = ".live-"

func livePath(lockPath, token string) string { return lockPath + liveSuffix + token }

// liveLock is a held liveness lock.
type liveLock struct {
	path string
	f    *os.File
	// shared: a shared lock of a sharer (see share.go); other sharers
	// may hold the file too.
	shared bool
}

// takeLive creates and exclusively locks the liveness file for token.
func takeLive(lockPath, token string) (*liveLock, error) {
	p := livePath(lockPath, token)
	f, err := osfile.CreateExcl(p, osfile.Locked)
	if err != nil {
		return nil, err
	}
	err = lockNew(f, "liveness file")
	if err != nil {
		f.Close()
		os.Remove(p)
		return nil, &fs.PathError{Op: "lock", Path: p, Err: err}
	}
	return &liveLock{path: p, f: f}, nil
}

// maxNote bounds what a judge reads of a liveness file: a process group id
// and its leader's start time.
const maxNote = 48

// jobGroup is a job's process group as a holder noted it: its id, and when
// its leader (the process whose pid the id is) started, in ms since the
// epoch (0: not known).
type jobGroup struct {
	id    int
	since int64
}

// note writes the job's process group into the liveness file: one write to
// a file the holder alone writes, with no guard and no new file, so that it
// can be done the moment the job starts. A judge that finds the liveness
// lock free reads it (see probeLive) when the record names no group yet.
func (l *liveLock) note(g jobGroup) error {
	_, err := l.f.WriteAt([]byte(formatNote(g)), 0)
	return err
}

// formatNote is a group as a liveness file or the etcd helper holds it:
// "4250 1791000000123" (id, then start; an older gpuexec wrote the id
// alone).
func formatNote(g jobGroup) string {
	return strconv.Itoa(g.id) + " " + strconv.FormatInt(g.since, 10)
}

// parseNote reads what note wrote; the zero group for anything else.
func parseNote(b []byte) jobGroup {
	id, since, _ := strings.Cut(strings.TrimRight(string(b), "\x00"), " ")
	n, err := strconv.Atoi(id)
	if err != nil || n <= 0 || n > math.MaxInt32 {
		return jobGroup{}
	}
	g := jobGroup{id: n}
	if t, err := strconv.ParseInt(since, 10, 64); err == nil && t > 0 {
		g.since = t
	}
	return g
}

// release removes the liveness file and drops the lock. Processes of the
// job that still hold the inherited file keep the kernel lock until they
// exit, but the file is gone from the folder.
func (l *liveLock) release() {
	if l == nil {
		return
	}
	if l.shared {
		// The last sharer: the file goes unless someone (a job that
		// outlived its gpuexec) still holds it.
		l.f.Close()
		removeDeadLiveFile(l.path)
		return
	}
	// Closed before it is removed: Windows cannot remove an open file.
	// The record is already gone, so nobody judges this file in between.
	osfile.Unlock(l.f)
	l.f.Close()
	os.Remove(l.path)
}

// drop closes a sharer's liveness file, leaving it to the other sharers.
func (l *liveLock) drop() {
	if l != nil {
		l.f.Close()
	}
}

// probeLive reports whether the liveness lock of token is held, and, when
// it is free, the job's process group the holder noted in it (zero: none).
// known=false when that cannot be told: no liveness file (a record of the
// seed's tool, or one whose holder died before creating it), or one that is
// not a regular file or cannot be opened or locked (put there or swapped
// by someone else); the holder is then judged by its pid and heartbeat, as
// the seed's are.
func probeLive(lockPath, token string) (held, known bool, group jobGroup) {
	held, known, group = probeLiveFile(livePath(lockPath, token))
	if held {
		group = jobGroup{}
	}
	return held, known, group
}

// probeLiveFile is probeLive for the liveness file at path; group is what
// its holder noted, held or not (see liveNote).
func probeLiveFile(path string) (held, known bool, group jobGroup) {
	n := probeLiveNote(path, false)
	return n.held, n.known, n.group
}

// liveNote is what a probe of a liveness file tells.
type liveNote struct {
	held, known bool
	// group is the job's process group noted in the file; never read
	// from one that others than its owner may write (a shared record's:
	// see osfile.Joined), which is nobody's word.
	group jobGroup
	// refused, for a file whose lock is free, says why group is not
	// taken for its owner's job (see ownersWord), "" when it is: such a
	// note keeps a lock held only while the file's mtime is fresh.
	refused string
	// mtime is the file's: its holder's last heartbeat (see
	// heldFile.touch) or note.
	mtime time.Time
}

// probeLiveNote is probeLiveFile, with, when withOwner, the note's owner
// told for a file whose lock is free (which may read all of /proc).
func probeLiveNote(path string, withOwner bool) liveNote {
	f, err := osfile.OpenRegular(path, false)
	if err != nil {
		return liveNote{}
	}
	defer f.Close()
	ok, err := osfile.TryLockShared(f)
	if err != nil {
		return liveNote{}
	}
	var b [maxNote]byte
	n, _ := f.ReadAt(b[:], 0)
	note := liveNote{known: true, group: parseNote(b[:n])}
	if fi, err := f.Stat(); err == nil {
		note.mtime = fi.ModTime()
		if othersMayWrite(fi) {
			note.group = jobGroup{}
		}
	}
	if !ok {
		note.held = true // held exclusively: a holder
		return note
	}
	osfile.Unlock(f)
	// Free of exclusive holders: held in shared mode by sharers (see
	// share.go), or free. Only an exclusive try tells; another probe's
	// shared lock, held for microseconds, can fail it, so it is tried
	// again a moment later before the file counts as held.
	for try := 0; ; try++ {
		ok, err = osfile.TryLock(f)
		if err != nil {
			return liveNote{}
		}
		if ok {
			osfile.Unlock(f)
			if withOwner && note.group.id > 0 {
				note.refused = ownersWord(f, note.group.id)
			}
			return note
		}
		if try == sharedProbeTries {
			note.held = true
			return note
		}
		time.Sleep(sharedProbePause)
	}
}

// A probe that finds a liveness file free of exclusive holders tries an
// exclusive lock up to sharedProbeTries more times, sharedProbePause
// apart, before it takes the file as held by sharers: another judge's
// probe holds its shared lock for a few microseconds.
const (
	sharedProbeTries = 2
	sharedProbePause = 500 * time.Microsecond
)

// removeDeadLive removes token's liveness file if nobody holds its lock.
func removeDeadLive(lockPath, token string) {
	removeDeadLiveFile(livePath(lockPath, token))
}

// removeDeadLiveFile removes the liveness file at path if it is a regular
// file whose lock nobody holds. Liveness files are only ever created under
// fresh random names, so nobody can have re-created it in between.
func removeDeadLiveFile(path string) {
	f, err := osfile.OpenRegular(path, false)
	if err != nil {
		return
	}
	ok, err := osfile.TryLock(f)
	if err == nil && ok {
		osfile.Unlock(f)
	}
	f.Close()
	if err == nil && ok {
		os.Remove(path)
	}
}
