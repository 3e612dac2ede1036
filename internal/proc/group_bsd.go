//go:build unix && !linux

package proc

// GroupAlive reports whether process group pgid still has a member.
func GroupAlive(pgid int) bool { return groupSignalable(pgid) }

// GroupAliveSince is GroupAlive, checking that pid pgid, if it exists,
// started at since (ms since the epoch; 0: not checked): otherwise the
// number names another process's group.
func GroupAliveSince(pgid int, since int64) bool {
	if since > 0 {
		if st, ok := Start(pgid); ok && (st-since > 1000 || since-st > 1000) {
			return false
		}
	}
	return groupSignalable(pgid)
}
