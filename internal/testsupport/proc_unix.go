//go:build unix

package testsupport

import (
	"errors"
	"syscall"
)

// Gone reports whether the process pid has ended: no process has that pid,
// or (on Linux) it is a zombie, dead and waiting to be reaped. A zombie
// whose parent is this process is reaped on the way: a test process that is
// a child subreaper inherits the orphans of what it kills, and a zombie left
// unreaped would keep its process group alive. So pid must never be that of
// a process this one started with os/exec: its Wait reaps it.
func Gone(pid int) bool {
	if unused(pid) {
		return true
	}
	return ended(pid)
}

// unused reports whether no process, zombies included, has pid.
func unused(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// kill sends pid SIGKILL.
func kill(pid int) { syscall.Kill(pid, syscall.SIGKILL) }

// reserve does nothing: a Unix kernel gives pids out in turn, and the
// only way to keep one would be a zombie, which kill still finds.
func reserve(int) (release func()) { return func() {} }
