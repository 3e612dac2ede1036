//go:build unix && !linux

package proc

// GroupAlive reports whether process group pgid still has a member.
func GroupAlive(pgid int) bool { return groupSignalable(pgid) }
