//go:build unix

package proc

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Alive reports whether pid exists: kill(pid, 0) succeeds, or fails
// with EPERM (the process exists but belongs to someone else).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// GroupSignalable reports, at the cost of one system call, whether process
// group pgid still has a member that kill can reach, zombies included (see
// GroupAlive for one that is not a zombie).
func GroupSignalable(pgid int) bool { return groupSignalable(pgid) }

// groupSignalable reports whether process group pgid still has a member
// that kill can reach (zombies included).
func groupSignalable(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	err := unix.Kill(-pgid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
