package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
	"github.com/gpuexec/gpuexec/internal/proc"
)

// A lock held in shared mode: several holders (sharers), each with a
// budget of video memory, hold one device's lock at once.
//
// The lock file stays one record in the seed's format, so that the seed's
// Node tool and older gpuexec versions see the device busy; it carries
// "share": true, which they ignore. Its pid names one of the sharers (a
// live one: a sharer that leaves rewrites it to name another, and every
// sharer rewrites it to name itself when it finds the pid gone), and every
// sharer touches its mtime.
//
// Liveness is the kernel's, as for any lock: every sharer holds a shared
// kernel lock on the record's liveness file (flock LOCK_SH, LockFileEx
// without LOCKFILE_EXCLUSIVE_LOCK), which its job inherits. A judge's probe
// (probeLiveFile) finds that file held while any sharer or its job runs,
// and free exactly when the last one is gone: no timer frees a shared lock.
//
// Each sharer also has a sidecar, "<lock>.share-<token>" (its own fresh
// token), created O_EXCL under the device's guard and exclusively locked
// by the sharer and inherited by its job. It holds the sharer's record
// (Sharer). A sidecar whose kernel lock is free is a dead sharer's: it is
// not counted and is removed by the next process that judges the lock
// under its guard. Budgets are counted from the live sidecars only.
//
// A sharer joins a shared lock only at its turn in the queue (as any
// waiter takes a free lock), a whole-card holder never joins one, and a
// sharer never joins a lock that is not shared. The last sharer to leave
// removes the record (removeIfSame, as every release).

// shareSuffix names a sharer's sidecar: "<lock>.share-<token>".
const shareSuffix = ".share-"

func sharePath(lockPath, token string) string { return lockPath + shareSuffix + token }

// shareHold is a sharer's own part of a shared lock: its sidecar.
type shareHold struct {
	path    string
	f       *os.File
	me      Sharer
	written int // bytes written so far: a rewrite pads to at least this
}

// newSidecar creates and exclusively locks this process's sidecar beside
// the lock at lockPath, sharing the record whose token is recordToken,
// with budget mib. Call with the lock's guard held.
func newSidecar(o Options, lockPath, recordToken string) (*shareHold, error) {
	selfStartOnce.Do(findSelfStart)
	p := sharePath(lockPath, newToken())
	f, err := osfile.CreateExcl(p, osfile.Sidecar)
	if err != nil {
		return nil, err
	}
	err = lockNew(f, "sidecar")
	now := time.Now().UTC()
	sh := &shareHold{path: p, f: f, me: Sharer{
		PID: os.Getpid(), Owner: o.Owner, Slug: o.Slug, Host: proc.HostName(), PIDStart: selfStart,
		MiB: o.ShareMiB, Since: now.Format(isoMillis), Lock: recordToken,
	}}
	if o.HoldLimit > 0 {
		sh.me.Deadline = now.Add(o.HoldLimit).Format(isoMillis)
	}
	if err == nil {
		err = sh.write()
	}
	if err != nil {
		f.Close()
		os.Remove(p)
		return nil, &fs.PathError{Op: "share", Path: p, Err: err}
	}
	return sh, nil
}

// write writes sh.me into the sidecar in place (the kernel lock is on this
// file: it is never replaced), padded with blanks to cover what was there.
func (sh *shareHold) write() error {
	b, err := json.Marshal(sh.me)
	if err != nil {
		return err
	}
	if n := sh.written - len(b); n > 0 {
		b = append(b, strings.Repeat(" ", n)...)
	}
	if _, err := sh.f.WriteAt(b, 0); err != nil {
		return err
	}
	sh.written = len(b)
	return nil
}

// leave closes and removes the sidecar: the sharer's budget is free.
func (sh *shareHold) leave() {
	osfile.Unlock(sh.f)
	sh.f.Close()
	os.Remove(sh.path)
}

// takeLiveShared creates the liveness file of a new shared record and
// takes a shared kernel lock on it.
func takeLiveShared(lockPath, token string) (*liveLock, error) {
	p := livePath(lockPath, token)
	f, err := osfile.CreateExcl(p, osfile.Joined)
	if err != nil {
		return nil, err
	}
	if err := lockShared(f); err != nil {
		f.Close()
		os.Remove(p)
		return nil, &fs.PathError{Op: "lock", Path: p, Err: err}
	}
	return &liveLock{path: p, f: f, shared: true}, nil
}

// joinLive takes a shared kernel lock on the liveness file of the shared
// record with token, which live sharers hold. It opens it for writing
// where it may (the file's last writable close is what a waiter's watch
// reports), else for reading.
func joinLive(lockPath, token string) (*liveLock, error) {
	p := livePath(lockPath, token)
	f, err := osfile.OpenRegular(p, true)
	if err != nil {
		if f, err = osfile.OpenRegular(p, false); err != nil {
			return nil, err
		}
	}
	if err := lockShared(f); err != nil {
		f.Close()
		return nil, &fs.PathError{Op: "lock", Path: p, Err: err}
	}
	return &liveLock{path: p, f: f, shared: true}, nil
}

func lockShared(f *os.File) error {
	ok, err := osfile.TryLockShared(f)
	if err == nil && !ok {
		err = errors.New("liveness file locked exclusively by another process")
	}
	return err
}

// joinable reports whether a sharer may consider joining the lock seen as
// st: held in shared mode by live sharers on this host, as the kernel says.
func joinable(st *Status) bool {
	return st.State == StateHeld && st.Orphan == "" && st.Info != nil && st.Info.Share &&
		st.Reason == "" && len(st.Sharers) > 0
}

// createShared takes the free lock at path as its first sharer: the
// liveness file (shared lock), the sidecar, then the record.
func createShared(o Options, path string, info *Info) (*liveLock, *shareHold, error) {
	info.Share = true
	live, err := takeLiveShared(path, info.Token)
	if err != nil {
		return nil, nil, err
	}
	sh, err := newSidecar(o, path, info.Token)
	if err != nil {
		live.release()
		return nil, nil, err
	}
	if err := createRecord(path, info); err != nil {
		sh.leave()
		live.release()
		return nil, nil, err
	}
	return live, sh, nil
}

// joinShared joins the shared lock seen as st (judged under the guard
// held): the liveness file's shared lock, then a sidecar.
func joinShared(o Options, st *Status) (*liveLock, *shareHold, error) {
	live, err := joinLive(st.Path, st.Info.Token)
	if err != nil {
		return nil, nil, err
	}
	sh, err := newSidecar(o, st.Path, st.Info.Token)
	if err != nil {
		live.drop()
		return nil, nil, err
	}
	return live, sh, nil
}

// holder is the sharer s as a record names its holder.
func (s Sharer) holder() Info {
	return Info{PID: s.PID, Owner: s.Owner, Slug: s.Slug, Host: s.Host, PIDStart: s.PIDStart,
		ChildPGID: s.ChildPGID, ChildStart: s.ChildStart}
}

// naming is the shared record (or cover) rec rewritten to name the holder
// who: its pid, owner, slug, host, start and job's group.
func naming(rec Info, who Info) Info {
	rec.PID, rec.Owner, rec.Slug, rec.Host, rec.PIDStart = who.PID, who.Owner, who.Slug, who.Host, who.PIDStart
	rec.ChildPGID, rec.ChildStart = who.ChildPGID, who.ChildStart
	return rec
}

// leaveGuarded is a sharer's release, under the guard (or without it when
// it cannot be had): its sidecar goes, and then, when no live sharer is
// left, the record (removeIfSame) and the liveness file; else, when the
// record names this sharer, it is rewritten to name a remaining one, so
// that the seed's tool, which judges by pid, keeps waiting. It reports
// whether the record was removed.
func (l *heldFile) leaveGuarded() (bool, error) {
	l.share.leave()
	rest := listSharers(l.o.Path, l.o.Stale, true)
	var mine []Sharer
	for _, s := range rest {
		// The record names its processes: never those of a sharer
		// whose processes are not its own (see vouch).
		if s.Lock == l.info.Token && s.PID > 0 && s.MiB >= 0 && s.Unattributed == "" {
			mine = append(mine, s)
		}
	}
	if len(rest) == 0 {
		removed, err := l.removeRecordNow()
		l.live.release()
		return removed, err
	}
	defer l.live.drop()
	st, err := l.readOurs()
	if err != nil || st.Info.PID != os.Getpid() || len(mine) == 0 {
		return false, nil
	}
	next := naming(*st.Info, mine[0].holder())
	if err := replaceRecord(l.o.Path, &next); err != nil {
		return false, fmt.Errorf("lock: handing the shared record on: %w", err)
	}
	return false, nil
}

// adopt rewrites a shared record or a cover whose pid is gone (a holder
// killed without leaving) to name this holder, so that the seed's tool,
// which judges by pid, keeps seeing the card busy. Call without the guard.
func (l *heldFile) adopt() error {
	st, err := readStatus(l.o.Path)
	if err != nil || l.whyNotOurs(st) != nil || st.Info.PID == os.Getpid() || proc.Alive(st.Info.PID) {
		return nil
	}
	return l.underGuard(l.beat, func() error {
		st, err := l.readOurs()
		if err != nil || st.Info.PID == os.Getpid() || proc.Alive(st.Info.PID) {
			return err
		}
		return l.nameInRecord(*st.Info, l.me())
	})
}

// noteSharer writes the job's group into this sharer's sidecar at once,
// without the guard (Held.NoteChild): the sidecar is this sharer's alone,
// and a reader that catches it being written reads it again.
func (l *heldFile) noteSharer(g jobGroup) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.share.me.ChildPGID, l.share.me.ChildStart = g.id, g.since
	return l.share.write()
}

// noteShare rewrites this sharer's sidecar with fn applied, under the
// guard; and, when the record names this sharer, the record too with the
// job's group.
func (l *heldFile) noteShare(fn func(*Sharer)) error {
	return l.underGuard(context.Background(), func() error {
		l.mu.Lock()
		fn(&l.share.me)
		err := l.share.write()
		me := l.share.me
		l.mu.Unlock()
		if err != nil {
			return err
		}
		st, err := l.readOurs()
		if err != nil || st.Info.PID != os.Getpid() || (st.Info.ChildPGID == me.ChildPGID && st.Info.ChildStart == me.ChildStart) {
			return err
		}
		return l.nameInRecord(*st.Info, me.holder())
	})
}

// nameInRecord rewrites the shared record or cover (rec, as read under the
// guard, which the caller holds) to name the holder who.
func (l *heldFile) nameInRecord(rec Info, who Info) error {
	next := naming(rec, who)
	return replaceRecord(l.o.Path, &next)
}
