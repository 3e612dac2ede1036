//go:build unix && !linux

package etcdhelper

import (
	"os/exec"
	"syscall"
)

// procAttr puts the helper in a process group of its own, so that a
// Ctrl+C at the terminal, meant for gpuexec (which forwards it to its job
// and then releases the lock), does not kill the helper that holds the lock
// before it can release it. These systems have no parent-death signal: a
// helper here outlives a gpuexec killed outright until its input ends.
func procAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// startTied starts cmd; untie does nothing here (see procattr_linux.go).
func startTied(cmd *exec.Cmd) (untie func(), err error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() {}, nil
}

// outliveUser does nothing: no parent-death signal to clear here.
func outliveUser() {}
