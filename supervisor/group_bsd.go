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

// straysLeft and strays know nothing here: without a subreaper, processes
// that left the job's group are re-parented to init and cannot be told
// from anyone else's. The liveness lock they inherit still keeps the lock
// held while they run.
func (g *group) straysLeft() bool { return false }

// childrenBefore notes nothing here (see strays).
func childrenBefore(bool) map[int]bool { return nil }
func (g *group) strays() []stray       { return nil }
