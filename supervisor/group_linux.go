//go:build linux

package supervisor

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// configure puts the child in a process group of its own and has the kernel
// SIGKILL it if gpuexec dies (Pdeathsig; see start for the thread it is
// tied to).
func configure(cmd *exec.Cmd) {
	// Orphans of the job are re-parented to gpuexec rather than to init,
	// so that reap can collect them and drain sees them go. Set here, not
	// in an init function, so that merely importing this package changes
	// nothing. Failure (old kernels) only loses that.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// reap collects exited processes of the group that were re-parented to
// gpuexec (the subreaper), without blocking.
func (g *group) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-g.pgid, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
