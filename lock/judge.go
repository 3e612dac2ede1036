package lock

import (
	"fmt"
	"time"

	"github.com/gpuexec/gpuexec/internal/escape"
	"github.com/gpuexec/gpuexec/internal/proc"
)

// writeGrace is how long a lock file with empty or unparseable content counts
// as held: it may be a lock whose creator has not written its record yet.
// After that it is stale.
const writeGrace = 10 * time.Second

// outlived reports whether a file whose mtime is age old (negative: in
// the future) no longer says that its writer lives, by its mtime alone:
// older than stale, or more than writeGrace in the future (no writer sets
// such a time, and one far ahead is no excuse to wait until then). It is
// the one rule for every file judged by its mtime: a record with no valid
// content (stale after writeGrace), a ticket or a sidecar that cannot be
// opened (after Options.Stale).
func outlived(age, stale time.Duration) bool {
	return age >= stale || age <= -writeGrace
}

// startTolerance is how far a live process's start time may differ from the
// one recorded in the lock before its pid is taken as recycled. Start times
// are read from the same clock on both sides with 10 ms resolution; a pid is
// never recycled within a second of the original process starting.
const startTolerance = time.Second

// Holder names the holder for messages.
func (s *Status) Holder() string {
	if s == nil {
		return "an unknown holder"
	}
	if s.Orphan != "" {
		if s.OrphanGroup > 0 {
			return fmt.Sprintf("a job whose lock record was removed (process group %d)", s.OrphanGroup)
		}
		return "a job whose lock record was removed"
	}
	if s.Info == nil {
		return "an unreadable lock record"
	}
	return s.Info.Holder()
}

// prober answers liveness questions about processes on this host. It is an
// interface so that judging can be tested without real processes.
type prober interface {
	// alive reports whether pid exists (EPERM counts as alive).
	alive(pid int) bool
	// startTime returns pid's start time in ms since the epoch, ok=false
	// when it cannot be read.
	startTime(pid int) (ms int64, ok bool)
	// groupAlive reports whether the job's process group g still has a
	// live process (see proc.GroupAliveSince: a group its number was
	// reused for does not count).
	groupAlive(g jobGroup) bool
	// liveHeld reports whether the liveness lock of the holder with this
	// token is held; known=false when it has no liveness file. When it is
	// free, group is the job's process group noted in the file (zero:
	// none).
	liveHeld(token string) (held, known bool, group jobGroup)
}

// osProber asks the OS about the lock at lockPath.
type osProber struct{ lockPath string }

func (osProber) alive(pid int) bool              { return proc.Alive(pid) }
func (osProber) startTime(pid int) (int64, bool) { return proc.Start(pid) }
func (osProber) groupAlive(g jobGroup) bool      { return proc.GroupAliveSince(g.id, g.since) }
func (p osProber) liveHeld(token string) (held, known bool, group jobGroup) {
	return probeLive(p.lockPath, token)
}

func fmtAge(d time.Duration) string { return d.Round(time.Second).String() }
func fmtStamp(t time.Time) string   { return t.Local().Format("2006-01-02 15:04:05") }
func sameHost(h string) bool        { return proc.SameHost(h) }

func withinTolerance(a, b int64) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= startTolerance.Milliseconds()
}

// judge decides whether the lock described by s (content and mtime already
// filled in) is held or stale, setting State, Alive and Reason.
//
// Keep it pure: it reads nothing but s, now and what the injected prober
// answers, so every rule is tested with a fake prober (judge_test.go) and
// fuzzed (FuzzJudge) without real processes or files. (A shared record's
// sharers are listed into s.Sharers before it is judged.)
//
// The rules, in order:
//   - content that is not a valid record is held while its mtime is under
//     writeGrace old (its writer may not have written it yet), stale after;
//   - a holder whose liveness lock (see liveSuffix) is held is alive,
//     however old its heartbeat and whatever host it names: the kernel says
//     the holder or a process of its job runs, and an old mtime only means
//     it was stopped (SIGSTOP, Ctrl+Z), the machine slept, the clock
//     jumped, or someone touched the file;
//   - otherwise a record from another host is held while its heartbeat is
//     younger than staleAfter, stale after: its pid cannot be checked here;
//   - otherwise (no liveness file: the seed's Node tool; or its lock free)
//     the holder is gone when its heartbeat is older than staleAfter, when
//     its liveness lock is free (its pid is not consulted then), or when
//     its pid is gone or now names a process started at another time than
//     the record says (a recycled pid);
//   - a gone holder's lock is still held while its job runs on this host:
//     the record's job process group (or the one the holder noted in its
//     liveness file) has a live process, whatever the heartbeat's age when
//     the group's start is known (an older gpuexec's record, without it,
//     only while its heartbeat is fresh); or, for a shared record, a
//     sharer is listed (its sidecar's lock is held, or its job still
//     runs, and, when that group is not its file owner's, only while the
//     sidecar is fresh: see readSharer; a sidecar that cannot be opened is
//     no evidence: see keepers);
//   - otherwise it is stale; a holder that is not gone is held.
func judge(s *Status, now time.Time, staleAfter time.Duration, p prober) {
	s.HeartbeatAge = now.Sub(s.ModTime)
	setStale := func(format string, a ...any) {
		s.State, s.Alive, s.Reason = StateStale, false, fmt.Sprintf(format, a...)
	}
	setHeld := func(format string, a ...any) {
		s.State, s.Alive, s.Reason = StateHeld, true, fmt.Sprintf(format, a...)
	}
	if s.Info == nil {
		// A record being written has a fresh mtime; one far in the
		// future is no excuse to block every job until then.
		if !outlived(s.HeartbeatAge, writeGrace) {
			setHeld("lock file has no valid record yet (%s old); it may still be being written", fmtAge(s.HeartbeatAge))
			return
		}
		setStale("lock file has no valid record and is %s old", fmtAge(s.HeartbeatAge))
		return
	}
	noHeartbeat := s.HeartbeatAge > staleAfter
	info := s.Info
	held, known, noted := p.liveHeld(info.Token)
	if known && held {
		// The kernel says the holder or a process of its job runs:
		// nothing a pid or a clock could say overrules that. Whatever
		// host name the record gives: a holder in another container
		// of this machine (another UTS namespace) holds its kernel
		// lock in the same kernel.
		if noHeartbeat {
			setHeld("no heartbeat for %s, but its liveness lock is held: the holder or its job still runs (stopped, or the clock jumped)", fmtAge(s.HeartbeatAge))
			return
		}
		setHeld("")
		return
	}
	if !sameHost(info.Host) {
		if noHeartbeat {
			setStale("no heartbeat for %s (stale after %s)", fmtAge(s.HeartbeatAge), staleAfter)
			return
		}
		setHeld("held from host %s: only its heartbeat can be checked", escape.Text(info.Host))
		return
	}
	gone := ""
	switch {
	case noHeartbeat:
		gone = fmt.Sprintf("no heartbeat for %s (stale after %s)", fmtAge(s.HeartbeatAge), staleAfter)
	case known:
		// The holder keeps its liveness lock from before it creates the
		// record until after it removes it: free means it is gone,
		// whatever process its pid may name by now.
		gone = fmt.Sprintf("pid %d is gone (its liveness lock is free)", info.PID)
	case !p.alive(info.PID):
		gone = fmt.Sprintf("pid %d is gone", info.PID)
	case info.PIDStart != 0:
		if started, ok := p.startTime(info.PID); ok && !withinTolerance(started, info.PIDStart) {
			gone = fmt.Sprintf("pid %d now belongs to another process (started %s, holder started %s)",
				info.PID, fmtStamp(time.UnixMilli(started)), fmtStamp(time.UnixMilli(info.PIDStart)))
		}
	}
	if gone == "" {
		setHeld("")
		return
	}
	// The job's group: from the record, or, before the record names it,
	// as the holder noted it in its liveness file when the job started.
	// A shared record's liveness file is joined for writing by every
	// sharer (see osfile.Joined): what is written there is nobody's word.
	g := jobGroup{id: info.ChildPGID, since: info.ChildStart}
	if g.id == 0 && !info.Share {
		g = noted
	}
	if g.id > 0 && (g.since > 0 || !noHeartbeat) && p.groupAlive(g) {
		setHeld("%s, but its job (process group %d) is still running", gone, g.id)
		s.keptBy = []int{g.id}
		return
	}
	if kept := keepers(s.Sharers); info.Share && len(kept) > 0 {
		setHeld("%s, but %s", gone, sharersLeft(kept))
		for _, sh := range kept {
			if !sh.Gone {
				s.keptBy = nil // a sharer that lives: its locks say when it ends
				break
			}
			s.keptBy = append(s.keptBy, sh.ChildPGID)
		}
		return
	}
	setStale("%s", gone)
}

// keepers are the sharers that keep a shared record whose holder is gone
// held: those whose sidecar says they live (its kernel lock is held, or
// its job runs). A file at a sidecar's name that cannot be opened says
// nothing of a sharer's life (anyone in the folder may make one): a live
// sharer of another user holds the record's liveness lock too.
func keepers(sharers []Sharer) []Sharer {
	var kept []Sharer
	for _, sh := range sharers {
		if !sh.Unopened {
			kept = append(kept, sh)
		}
	}
	return kept
}
