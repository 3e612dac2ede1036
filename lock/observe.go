package lock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/gpuexec/gpuexec/internal/proc"
)

// looker is a prober that also tells whether a process or a job's group
// can run, and what a holder noted in its liveness file: what observe asks.
type looker interface {
	prober
	// run says whether pid can run (see proc.RunOf).
	run(pid int) proc.Run
	// groupRun says whether the job's group g can run (see
	// proc.GroupRun).
	groupRun(g jobGroup) proc.Run
	// liveNote is the job's group the holder with this token noted in
	// its liveness file, held or not (zero: none, or no file).
	liveNote(token string) jobGroup
	// groupUID is the real uid the process group pgid runs as; ok
	// false when it cannot be told (see proc.GroupUID).
	groupUID(pgid int) (uid int, ok bool)
}

func (osProber) run(pid int) proc.Run         { return proc.RunOf(pid) }
func (osProber) groupRun(g jobGroup) proc.Run { return proc.GroupRun(g.id, g.since) }
func (p osProber) liveNote(token string) jobGroup {
	_, _, g := probeLiveFile(livePath(p.lockPath, token))
	return g
}

// observe fills in what the OS says of a held lock's holder and its job
// on this host (Status.HolderProcess, JobGroup, JobProcess), after it was
// judged: for status and clear, which say so; judging never depends on
// it. A cover or a shared record names one of several holders, and is
// left as it is, as is a holder on another host and a lock whose record
// was removed (see findOrphan).
//
// Pids and groups read from the folder are anyone's word: the holder's
// pid is told running or stopped only when it names the process its
// record's start time says (gone when no process has it, or another
// does), and the job's group only when its leader's start time is noted
// (see proc.GroupAliveSince). Nor is the group that runs as another user
// than the record's owner vouched for as the job (Status.JobGroupDoubt):
// whoever may write in the folder can name anyone's group, with its
// leader's start time, which anyone reads. Root's records are taken as
// they are.
func observe(s *Status, p looker) {
	if s.State != StateHeld || s.Info == nil || s.Orphan != "" || s.Info.Share || s.Info.Cover || !sameHost(s.Info.Host) {
		return
	}
	info := s.Info
	s.HolderProcess = processOf(info.PID, info.PIDStart, p)
	g := jobGroup{id: info.ChildPGID, since: info.ChildStart}
	if g.id == 0 {
		g = p.liveNote(info.Token)
	}
	if g.id > 0 && g.since > 0 {
		s.JobGroup = g.id
		s.JobProcess = procState(p.groupRun(g))
		if s.ownerTold && s.recordOwner > 0 && s.JobProcess != ProcGone {
			if uid, ok := p.groupUID(g.id); ok && uid != s.recordOwner {
				s.JobGroupDoubt = &ForeignGroup{RecordUID: s.recordOwner, GroupUID: uid}
			}
		}
	}
}

// processOf is the state of the process pid whose start time was recorded
// as start (0: not recorded): ProcGone when no process has that pid, or
// one started at another time has it; "" when it cannot be told from
// another process (no start recorded, or none readable).
func processOf(pid int, start int64, p looker) ProcState {
	if !p.alive(pid) {
		return ProcGone
	}
	if start == 0 {
		return ""
	}
	started, ok := p.startTime(pid)
	switch {
	case !ok:
		return ""
	case !withinTolerance(started, start):
		return ProcGone
	}
	return procState(p.run(pid))
}

func procState(r proc.Run) ProcState {
	switch r {
	case proc.Running:
		return ProcRunning
	case proc.Stopped:
		return ProcStopped
	case proc.Gone:
		return ProcGone
	}
	return ProcUnknown
}

// folderExists is nil when the folder dir (made safe: see safeLockPath) exists,
// or cannot be told (the error of what reads it then says why); an error
// wrapping ErrNoFolder when it does not, and one wrapping syscall.ENOTDIR
// when it is not a folder (a lock file's path below it would read as
// missing, as a free lock).
func folderExists(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &fs.PathError{Op: "inspect", Path: dir, Err: ErrNoFolder}
	case err == nil && !fi.IsDir():
		return fmt.Errorf("%s: %w", dir, notFolder{})
	}
	return nil
}

// notFolder is syscall.ENOTDIR said the same on every system (Windows's
// ENOTDIR reads "Path not found").
type notFolder struct{}

func (notFolder) Error() string        { return "not a directory" }
func (notFolder) Is(target error) bool { return target == syscall.ENOTDIR }
