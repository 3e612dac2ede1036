//go:build unix

package etcdhelper

import (
	"os/exec"
	"syscall"
)

// procAttr puts the helper in a process group of its own, so that a
// Ctrl+C at the terminal, meant for gpuexec (which forwards it to its job
// and then releases the lock), does not kill the helper that holds the lock
// before it can release it.
func procAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
