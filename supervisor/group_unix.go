//go:build unix

package supervisor

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpuexec/gpuexec/signals"
)

// terminate is the graceful stop sent at --timeout and when the lock is lost.
var terminate os.Signal = syscall.SIGTERM

// group is the job: the child's process group (its id is the child's pid)
// and, where gpuexec can find them (Linux, see strays), the processes of
// the job that left that group (setsid, setpgid: daemons it started).
type group struct {
	pgid int
	// sole: the process has no children but the job's (Config.SoleJob),
	// and others (see childrenBefore).
	sole   bool
	others map[int]bool
	// warned remembers the strays already sent the graceful stop.
	warned map[int]bool
}

func newGroup(cmd *exec.Cmd, sole bool, others map[int]bool) (*group, error) {
	return &group{pgid: cmd.Process.Pid, sole: sole, others: others, warned: map[int]bool{}}, nil
}

// id is what the lock records as childPgid.
func (g *group) id() int { return g.pgid }

// stray is a process of the job outside its group, and its own group;
// ownGroup: every member of that group is a process of the job.
type stray struct {
	pid, pgid int
	ownGroup  bool
}

// signal sends sig to every process of the job: its group, and each
// process of the job outside it (see signalStray).
func (g *group) signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		s = syscall.SIGTERM
	}
	err := unix.Kill(-g.pgid, s)
	for _, st := range g.strays() {
		if signals.Of(sig) == signals.End {
			g.warned[st.pid] = true
		}
		g.signalStray(st, s)
	}
	if errors.Is(err, unix.ESRCH) {
		err = nil // the group is gone; strays may not be
	}
	return err
}

// signalStray sends s to a process of the job outside its group, and to
// that process's own group (a daemon's children, and a process that keeps
// forking into new pids, are there) when every member of it is the job's.
// A stop request (SIGTSTP) becomes SIGSTOP: a stray that left for a
// session of its own is in an orphaned process group, for which the
// kernel drops SIGTSTP.
func (g *group) signalStray(st stray, s syscall.Signal) {
	if s == syscall.SIGTSTP {
		s = syscall.SIGSTOP
	}
	unix.Kill(st.pid, s)
	if st.ownGroup && st.pgid > 1 && st.pgid != g.pgid && st.pgid != unix.Getpgrp() {
		unix.Kill(-st.pgid, s)
	}
}

// kill sends SIGKILL to every process of the job.
func (g *group) kill() error {
	err := unix.Kill(-g.pgid, unix.SIGKILL)
	for _, st := range g.strays() {
		g.signalStray(st, unix.SIGKILL)
	}
	if errors.Is(err, unix.ESRCH) {
		err = nil
	}
	return err
}

// alive reports whether any process of the job is left: in its group, or
// outside it (see strays).
func (g *group) alive() bool {
	err := unix.Kill(-g.pgid, 0)
	return err == nil || errors.Is(err, unix.EPERM) || g.straysLeft()
}

func (g *group) close() {}

// resume continues every process of the job (SIGCONT), in case it is
// stopped.
func (g *group) resume() { g.signal(syscall.SIGCONT) }

// stopStrays sends sig, then SIGCONT (as timeout(1) does: a stopped
// process acts on a signal only once continued), to the processes of the
// job outside its group that have not had it yet.
func (g *group) stopStrays(sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		s = syscall.SIGTERM
	}
	for _, st := range g.strays() {
		if !g.warned[st.pid] {
			g.warned[st.pid] = true
			g.signalStray(st, s)
			g.signalStray(st, syscall.SIGCONT)
		}
	}
}

// describeLeft names what is left of the job, for the log: "group 4250,
// pids 4301 4302 outside it".
func (g *group) describeLeft() string {
	s := "process group " + strconv.Itoa(g.pgid)
	if strays := g.strays(); len(strays) > 0 {
		s += "; outside it, pids"
		for _, st := range strays {
			s += " " + strconv.Itoa(st.pid)
		}
	}
	return s
}

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

// stopSelf stops gpuexec itself, as Ctrl+Z stops a program in a shell: the
// shell sees it stopped and can continue it (fg, bg), which sends SIGCONT.
func stopSelf() { unix.Kill(os.Getpid(), unix.SIGSTOP) }
