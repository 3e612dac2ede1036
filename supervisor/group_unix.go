//go:build unix

package supervisor

import (
	"errors"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// terminate is the graceful stop sent at --timeout and when the lock is lost.
var terminate os.Signal = syscall.SIGTERM

// group is the child's process group; its id is the child's pid.
type group struct{ pgid int }

func newGroup(cmd *exec.Cmd) (*group, error) {
	return &group{pgid: cmd.Process.Pid}, nil
}

// id is what the lock records as childPgid.
func (g *group) id() int { return g.pgid }

// signal sends sig to every process of the group.
func (g *group) signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		s = syscall.SIGTERM
	}
	return unix.Kill(-g.pgid, s)
}

// kill sends SIGKILL to every process of the group.
func (g *group) kill() error { return unix.Kill(-g.pgid, unix.SIGKILL) }

// alive reports whether any process of the group is left.
func (g *group) alive() bool {
	err := unix.Kill(-g.pgid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

func (g *group) close() {}

// exitStatus maps the child's end to gpuexec's status: its exit code, or
// 128+N when signal N killed it.
func exitStatus(st *os.ProcessState) int {
	if st == nil {
		return ExitFailed
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}
