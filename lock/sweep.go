package lock

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuexec/gpuexec/internal/proc"
)

// Prefixes of what a process killed mid-step leaves beside a lock: a lock
// set aside while being cleared or released (the seed's tool names its own
// the same way) and a record being rewritten.
const (
	stalePart = ".stale-"
	tmpPart   = ".tmp-"
)

// sweep looks at what is left beside the lock at lockPath, whose record is
// gone. Liveness files whose kernel lock nobody holds, and set-aside or
// temporary files ("<lock>.stale-PID-*", "<lock>.tmp-PID-*") whose process
// is gone (a live process's own, such as a seed tool's set-aside lock, is
// left alone), are leftovers of processes killed mid-step: it removes them,
// if they are regular files (anything else is nobody's leftover).
// A liveness file whose lock is still held is a holder whose record was
// removed (clear --force, or the seed's tool clearing it by its mtime)
// while its job still runs: sweep returns it as a held lock, and nothing
// may take the lock until that job is gone. So is a liveness file or a
// sharer's sidecar whose lock is free but whose noted job's group still
// runs (a holder SIGKILLed, its job gone on without the file), while the
// note is its file owner's word (see ownersWord, vouch); one that is not
// (a file anyone may write, one naming another user's processes: a
// member's plant, or a real job that took root with sudo) keeps the lock
// held only while the file is fresh (see outlived, with stale: its holder
// touches it at each heartbeat), and clear --force removes it (see
// clearLeftovers). Names are only matched, never taken from file
// contents. Call with the guard held and the lock seen free, so that no
// liveness file can belong to a current record.
func sweep(lockPath string, stale time.Duration) (busy *Status) {
	return sweepLeftovers(lockPath, stale, true, false)
}

// findOrphan is sweep that changes nothing: it finds a holder whose record
// is gone while its job still runs.
func findOrphan(lockPath string, stale time.Duration) *Status {
	return sweepLeftovers(lockPath, stale, false, false)
}

// clearLeftovers is clear --force of a lock whose record is gone: it
// removes the files whose lock nobody holds and whose note keeps the lock
// held without being their owner's word (see sweep), and returns what
// still keeps it held (a job whose record was removed), and what it
// removed, for the log.
func clearLeftovers(lockPath string, stale time.Duration) (busy *Status, cleared []*Status) {
	return sweepAll(lockPath, stale, false, true)
}

func sweepLeftovers(lockPath string, stale time.Duration, remove, force bool) *Status {
	busy, _ := sweepAll(lockPath, stale, remove, force)
	return busy
}

func sweepAll(lockPath string, stale time.Duration, remove, force bool) (busy *Status, cleared []*Status) {
	dir := filepath.Dir(lockPath)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil
	}
	base := filepath.Base(lockPath)
	keep := func(st *Status) {
		if force && st.orphanRefused != "" {
			removeDeadLiveFile(st.Orphan)
			cleared = append(cleared, st)
			return
		}
		if busy == nil {
			busy = st
		}
	}
	for _, e := range ents {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, base)
		if !ok {
			continue
		}
		path := filepath.Join(dir, name)
		switch {
		case strings.HasPrefix(rest, liveSuffix) && validToken(rest[len(liveSuffix):]):
			n := probeLiveNote(path, true)
			g := n.group
			switch {
			case n.known && n.held:
				keep(orphanStatus(lockPath, path, g.id))
			case n.known && g.id > 0 && g.since > 0 && (n.refused == "" || !outlived(time.Since(n.mtime), stale)) &&
				proc.GroupAliveSince(g.id, g.since):
				// Its holder is gone and its job closed the file, but
				// a process of the job's group still runs.
				keep(keptStatus(lockPath, path, g.id, n.refused, n.mtime, stale))
			case n.known && remove:
				removeDeadLiveFile(path)
			}
		case strings.HasPrefix(rest, shareSuffix) && validToken(rest[len(shareSuffix):]):
			// A sharer's sidecar: a live one whose record is gone is a
			// sharer whose job still runs (its liveness file, held too,
			// says the same); a dead one is a leftover. One whose
			// processes are not attributed to it (see vouch) keeps
			// the lock held while it is locked, and while fresh once
			// it is not (see readSharer).
			s, live, _ := readSharer(path, stale)
			switch {
			case live && s.Gone:
				keep(keptStatus(lockPath, path, s.ChildPGID, s.Unattributed, s.mtime, stale))
			case live:
				keep(orphanStatus(lockPath, path, 0))
			case remove:
				removeDeadLiveFile(path)
			}
		case !remove:
		default:
			if pid, ok := leftoverPID(rest); ok && !proc.Alive(pid) && e.Type().IsRegular() {
				os.Remove(path)
			}
		}
	}
	return busy, cleared
}

// orphanStatus is the lock at lockPath held by the job of a holder whose
// record is gone, as its locked liveness file (or sidecar) at live shows.
func orphanStatus(lockPath, live string, group int) *Status {
	st := &Status{
		State: StateHeld, Path: lockPath, Alive: true, Orphan: live, OrphanGroup: group,
		Reason: fmt.Sprintf("its record was removed (a forced clear?) while its job still runs: %s is locked; the lock is free when that job ends", filepath.Base(live)),
	}
	if fi, err := os.Lstat(live); err == nil {
		st.ModTime = fi.ModTime()
	}
	return st
}

// keptStatus is the lock at lockPath held by the process group id that
// the file at path, whose lock nobody holds, notes: the job of a holder
// whose record is gone and who is gone too. refused says why the note is
// not its file owner's word (see ownersWord), "" when it is; such a note
// keeps the lock held only until the file, last changed at mtime, is
// stale old.
func keptStatus(lockPath, path string, id int, refused string, mtime time.Time, stale time.Duration) *Status {
	st := orphanStatus(lockPath, path, id)
	st.keptBy = []int{id}
	st.Reason = fmt.Sprintf("its record was removed (a forced clear?) while its job still runs: process group %d, noted in %s; the lock is free when that job ends", id, filepath.Base(path))
	if refused != "" {
		st.orphanRefused = refused
		st.Reason = fmt.Sprintf("its record was removed while a job may still run: process group %d, noted in %s, which nobody holds, but not taken for its owner's word (%s): held until %s (--stale %s after the file's last change) or clear --force",
			id, filepath.Base(path), refused, fmtStamp(mtime.Add(stale)), stale)
	}
	return st
}

// leftoverPID parses the rest of a set-aside or temporary file's name after
// the lock's: ".stale-PID-xxxxxx" or ".tmp-PID-xxxxxx", six lowercase hex
// digits, exactly as gpuexec and the seed's tool name them. Names are
// matched whole, so that no other lock's file (a lock named
// "gpu.lock.stale-1-x.lock") is ever taken for one.
func leftoverPID(rest string) (int, bool) {
	var after string
	switch {
	case strings.HasPrefix(rest, stalePart):
		after = rest[len(stalePart):]
	case strings.HasPrefix(rest, tmpPart):
		after = rest[len(tmpPart):]
	default:
		return 0, false
	}
	pidText, suffix, ok := strings.Cut(after, "-")
	if !ok || len(suffix) != 6 || strings.Trim(suffix, "0123456789abcdef") != "" {
		return 0, false
	}
	for _, c := range pidText {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	pid, err := strconv.Atoi(pidText)
	return pid, err == nil && pid > 0
}
