//go:build windows

package etcdhelper

import (
	"os"
	"os/exec"
	"syscall"
)

// procAttr starts the helper in a console process group of its own, so
// that a Ctrl+C meant for gpuexec (which stops its job and then releases the
// lock) does not kill the helper that holds the lock before it can release
// it. Windows has no parent-death signal: a helper here outlives a gpuexec
// killed outright until its input ends.
func procAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
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

// killHelper kills the helper.
func killHelper(p *os.Process) { p.Kill() }
