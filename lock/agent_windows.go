//go:build windows

package lock

import (
	"os/exec"
	"syscall"
)

// agentProcAttr starts the helper in a console process group of its own, so
// that a Ctrl+C meant for gpuexec (which stops its job and then releases the
// lock) does not kill the helper that holds the lock before it can release
// it.
func agentProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}
