//go:build windows

package etcdhelper

import (
	"os/exec"
	"syscall"
)

// procAttr starts the helper in a console process group of its own, so
// that a Ctrl+C meant for gpuexec (which stops its job and then releases the
// lock) does not kill the helper that holds the lock before it can release
// it.
func procAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}
