//go:build unix && !linux

package supervisor

import (
	"os/exec"
	"syscall"
)

// configure puts the child in a process group of its own. These systems
// have no parent-death signal: if gpuexec is SIGKILLed the group runs on,
// and the lock stays held (childPgid) until the group is gone.
func configure(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// reap does nothing: without a subreaper, orphans go to init.
func (g *group) reap() {}
