//go:build unix

package etcdhelper

import (
	"os"
	"syscall"
)

// killHelper kills the helper and what it started in its process group
// (procAttr gave it one of its own): nothing of a helper that stopped
// answering keeps running, nor holds its output open. Call it only before
// the helper is reaped: its group's id is its pid, which stays its until
// then.
func killHelper(p *os.Process) {
	syscall.Kill(-p.Pid, syscall.SIGKILL)
	p.Kill()
}
