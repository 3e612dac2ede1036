package lock

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
// may take the lock until that job is gone. Names are only matched, never
// taken from file contents. Call with the guard held and the lock seen
// free, so that no liveness file can belong to a current record.
func sweep(lockPath string) (busy *Status) { return sweepLeftovers(lockPath, true) }

// findOrphan is sweep that changes nothing: it finds a holder whose record
// is gone while its job still runs.
func findOrphan(lockPath string) *Status { return sweepLeftovers(lockPath, false) }

func sweepLeftovers(lockPath string, remove bool) (busy *Status) {
	dir := filepath.Dir(lockPath)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	base := filepath.Base(lockPath)
	for _, e := range ents {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, base)
		if !ok {
			continue
		}
		path := filepath.Join(dir, name)
		switch {
		case strings.HasPrefix(rest, liveSuffix) && validToken(rest[len(liveSuffix):]):
			held, known, group := probeLiveFile(path)
			switch {
			case known && held:
				if busy == nil {
					busy = orphanStatus(lockPath, path, group.id)
				}
			case known && group.id > 0 && group.since > 0 && proc.GroupAliveSince(group.id, group.since):
				// Its holder is gone and its job closed the file, but
				// a process of the job's group still runs.
				if busy == nil {
					busy = orphanStatus(lockPath, path, group.id)
					busy.keptBy = []int{group.id}
					busy.Reason = fmt.Sprintf("its record was removed (a forced clear?) while its job still runs: process group %d, noted in %s; the lock is free when that job ends", group.id, filepath.Base(path))
				}
			case known && remove:
				removeDeadLiveFile(path)
			}
		case strings.HasPrefix(rest, shareSuffix) && validToken(rest[len(shareSuffix):]):
			// A sharer's sidecar: a live one whose record is gone is a
			// sharer whose job still runs (its liveness file, held too,
			// says the same); a dead one is a leftover. One whose
			// processes are not attributed to it (see vouch) keeps
			// the lock held as well.
			_, live := readSharer(path)
			switch {
			case live:
				if busy == nil {
					busy = orphanStatus(lockPath, path, 0)
				}
			case !live && remove:
				removeDeadLiveFile(path)
			}
		case !remove:
		default:
			if pid, ok := leftoverPID(rest); ok && !proc.Alive(pid) && e.Type().IsRegular() {
				os.Remove(path)
			}
		}
	}
	return busy
}

// orphanStatus is the lock at lockPath held by the job of a holder whose
// record is gone, as its locked liveness file at live shows.
func orphanStatus(lockPath, live string, group int) *Status {
	st := &Status{
		State: StateHeld, Path: lockPath, Alive: true, orphan: live, orphanGroup: group,
		Reason: fmt.Sprintf("its record was removed (a forced clear?) while its job still runs: %s is locked; the lock is free when that job ends", filepath.Base(live)),
	}
	if fi, err := os.Lstat(live); err == nil {
		st.ModTime = fi.ModTime()
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
