package lock

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Prefixes of what a process killed mid-step leaves beside a lock: a lock
// set aside while being cleared or released (the seed's tool names its own
// the same way) and a record being rewritten.
const (
	stalePart = ".stale-"
	tmpPart   = ".tmp-"
)

// sweep removes what processes killed mid-step left beside the lock at
// lockPath: liveness files whose kernel lock nobody holds, and set-aside or
// temporary files ("<lock>.stale-PID-*", "<lock>.tmp-PID-*") whose process
// is gone (a live process's own, such as a seed tool's set-aside lock, is
// left alone). Call with the guard held and the lock seen free, so that no
// liveness file can belong to a current record.
func sweep(lockPath string) {
	ents, err := os.ReadDir(filepath.Dir(lockPath))
	if err != nil {
		return
	}
	base := filepath.Base(lockPath)
	for _, e := range ents {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, base)
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(rest, LiveSuffix):
			removeDeadLive(lockPath, strings.TrimPrefix(rest, LiveSuffix))
		case strings.HasPrefix(rest, stalePart), strings.HasPrefix(rest, tmpPart):
			_, after, _ := strings.Cut(rest[1:], "-")
			pidText, _, _ := strings.Cut(after, "-")
			if pid, err := strconv.Atoi(pidText); err == nil && pid > 0 && !processAlive(pid) {
				os.Remove(filepath.Join(filepath.Dir(lockPath), name))
			}
		}
	}
}
