//go:build unix && !linux

package lock

// groupAlive reports whether process group pgid still has a member.
func groupAlive(pgid int) bool { return groupSignalable(pgid) }
