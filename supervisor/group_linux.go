//go:build linux

package supervisor

import (
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpuexec/gpuexec/internal/proc"
)

// configure puts the child in a process group of its own and has the kernel
// SIGKILL it if gpuexec dies (Pdeathsig; see start for the thread it is
// tied to).
func configure(cmd *exec.Cmd) {
	// Orphans of the job are re-parented to gpuexec rather than to init,
	// so that reap can collect them and drain sees them go, whatever
	// group or session they moved to. Set here, not in an init function,
	// so that merely importing this package changes nothing. Failure
	// (old kernels) only loses that.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// reap collects exited processes of the job re-parented to gpuexec (the
// subreaper), without blocking: of its group, and with SoleJob any child
// but the ones gpuexec had before the job (see others). Call only once the
// child itself has been waited for.
func (g *group) reap() {
	reapAll := func(who int) {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(who, &ws, unix.WNOHANG|unix.WALL, nil)
			if pid <= 0 || err != nil {
				return
			}
		}
	}
	switch {
	case g.sole && len(g.others) == 0:
		reapAll(-1)
	case g.sole:
		reapAll(-g.pgid)
		for _, s := range g.strays() {
			reapAll(s.pid)
		}
	default:
		reapAll(-g.pgid)
	}
}

// childrenBefore notes, with SoleJob, the children gpuexec has before the
// job starts (the etcd helper of an etcd:// lock): they and theirs are not
// the job's. Usually there are none, which one system call tells.
func childrenBefore(sole bool) map[int]bool {
	if !sole {
		return nil
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil); err != nil {
		return nil // ECHILD: none
	}
	others := map[int]bool{}
	tree, _ := proc.Tree()
	for _, pid := range tree[os.Getpid()] {
		others[pid] = true
	}
	return others
}

// straysLeft reports whether any process of the job outside its group is
// left, once the child itself was waited for. As the subreaper gpuexec
// inherits every orphan of the job, wherever it moved (setsid, double
// forks): every process of the job still running descends from one of its
// children. So, with no other children (see childrenBefore), none left
// means none of the job is left, which one system call tells.
func (g *group) straysLeft() bool {
	if !g.sole {
		return false
	}
	if len(g.others) > 0 {
		return len(g.strays()) > 0
	}
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil)
	return err == nil
}

// strays are the processes of the job outside its group: the descendants
// of gpuexec (see straysLeft), found in /proc, whose process group is not
// the job's, but for gpuexec's other children and theirs.
func (g *group) strays() []stray {
	if !g.sole {
		return nil
	}
	tree, pgrp := proc.Tree()
	var out []stray
	job := map[int]bool{} // every process of the job
	next := []int{os.Getpid()}
	seen := map[int]bool{os.Getpid(): true}
	for len(next) > 0 {
		p := next[len(next)-1]
		next = next[:len(next)-1]
		for _, c := range tree[p] {
			if seen[c] || g.others[c] {
				continue
			}
			seen[c] = true
			job[c] = true
			next = append(next, c)
			if pgrp[c] != g.pgid {
				out = append(out, stray{pid: c, pgid: pgrp[c]})
			}
		}
	}
	// A stray's group is the job's to signal only if every member is a
	// process of the job: setpgid lets a process join any group of its
	// session (the shell's, another user's), which must never be hit.
	outsiders := map[int]bool{}
	for pid, pg := range pgrp {
		if !job[pid] {
			outsiders[pg] = true
		}
	}
	for i := range out {
		out[i].ownGroup = !outsiders[out[i].pgid]
	}
	return out
}
