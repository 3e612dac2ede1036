package lock

import (
	"path/filepath"
	"strings"
)

// OwnFile reports whether path names one of the files of the lock at
// lockPath, or of one of its devices' locks (gpu3.lock beside gpu.lock):
// the lock file, its guard, a live file, a queue ticket or a sharer's
// file. Other files written beside a lock (a journal, a log) must not be
// one of them: a line appended to a lock file reads as an unreadable
// record to every job. Both paths are cleaned; names alone decide.
func OwnFile(lockPath, path string) bool {
	lockPath, path = filepath.Clean(lockPath), filepath.Clean(path)
	base := path
	if b, ok := strings.CutSuffix(path, guardSuffix); ok {
		base = b
	}
	for _, s := range []string{liveSuffix, ticketSuffix, shareSuffix} {
		if i := strings.LastIndex(path, s); i > 0 && !strings.ContainsRune(path[i:], filepath.Separator) {
			base = path[:i]
		}
	}
	if base == lockPath {
		return true
	}
	l, _, ok := deviceLock(base)
	return ok && l == lockPath
}
