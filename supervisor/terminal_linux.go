//go:build linux

package supervisor

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// terminal keeps the job and the terminal in step, as a shell does with a
// job it runs in the foreground. When gpuexec's stdin is a terminal and
// gpuexec is in the terminal's foreground, the job's process group is made
// the foreground group for the run: the job can read the terminal (a
// prompt, a debugger) instead of stopping on SIGTTIN, and Ctrl+C and Ctrl+Z
// reach it directly. When the job stops (Ctrl+Z), gpuexec takes the
// terminal back and stops too, so that the shell sees its job stopped; when
// the shell continues gpuexec (fg, bg), gpuexec continues the job, in the
// foreground again if it was continued there. The terminal is given back
// to gpuexec's group when the job is gone.
//
// What the terminal sends its foreground group (Ctrl+C, Ctrl+\, a hangup)
// reaches the job's group alone; with a sentinel (Config.Sentinel), a
// process of gpuexec's in that group, gpuexec hears of each, so that it
// ends the job as it ends one it forwarded a signal to.
type terminal struct {
	fd   int // the terminal (stdin); -1 when the job does not have it
	own  int // gpuexec's process group
	job  int // the job's process group, once started
	pid  int // the child
	chld chan os.Signal
	// withSentinel: start a sentinel (Config.Sentinel); sent is it,
	// once started.
	withSentinel bool
	sent         *sentinel
}

// takeTerminal prepares cmd to start in the terminal's foreground when the
// job should have it (stdin, gpuexec's own, is the terminal and gpuexec is
// in its foreground); otherwise the terminal is left alone. withSentinel:
// this program can be the job's sentinel (Config.Sentinel).
func takeTerminal(cmd *exec.Cmd, ownStdin, withSentinel bool) *terminal {
	t := &terminal{fd: -1, own: unix.Getpgrp(), withSentinel: withSentinel}
	if !ownStdin {
		return t
	}
	fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	if err != nil || fg != t.own {
		return t // not a terminal, or gpuexec runs in the background
	}
	t.fd = 0
	// The child sets its group as the foreground before it runs a
	// single instruction of the job (with SIGTTOU blocked).
	cmd.SysProcAttr.Foreground = true
	cmd.SysProcAttr.Ctty = t.fd
	return t
}

// started notes the job's group and starts watching for it to stop and,
// with a sentinel, for what the terminal sends it. The error says why
// there is no sentinel.
func (t *terminal) started(pid, pgid int) error {
	t.pid, t.job = pid, pgid
	if t.fd < 0 {
		return nil
	}
	t.chld = make(chan os.Signal, 1)
	signal.Notify(t.chld, syscall.SIGCHLD)
	if !t.withSentinel {
		return nil
	}
	var err error
	t.sent, err = startSentinel(pgid)
	return err
}

// stopped delivers a wake-up when the child may have stopped (nil when the
// job does not have the terminal).
func (t *terminal) stopped() <-chan os.Signal { return t.chld }

// heard delivers each signal the terminal sent the job's group (SIGINT,
// SIGQUIT, SIGHUP), or that gpuexec sent it itself: the sentinel cannot
// tell them apart. Nil without a sentinel.
func (t *terminal) heard() <-chan os.Signal {
	if t.sent == nil {
		return nil
	}
	return t.sent.heard
}

// listening is closed once the sentinel listens; nil without one.
func (t *terminal) listening() <-chan struct{} {
	if t.sent == nil {
		return nil
	}
	return t.sent.ready
}

// pauseSentinel stops the sentinel, if any, as gpuexec stops with the
// job (see sentinel.pause); the group's SIGCONT continues it.
func (t *terminal) pauseSentinel() {
	if t.sent != nil {
		t.sent.pause()
	}
}

// stopSentinel ends the sentinel, if any, and waits for it: call it once
// the job's command has ended, before what is left of its group is
// looked for.
func (t *terminal) stopSentinel() {
	if t.sent != nil {
		t.sent.stop()
		t.sent = nil
	}
}

// jobStopped reports whether the child is stopped, taking the stop's
// report (waitid with WSTOPPED alone never reaps an exited child).
func (t *terminal) jobStopped() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, t.pid, &info, unix.WSTOPPED|unix.WNOHANG, nil)
	// With nothing to report the kernel leaves si_signo 0; a stop
	// reported is SIGCHLD with si_code CLD_STOPPED.
	return err == nil && info.Signo == int32(unix.SIGCHLD) && info.Code == cldStopped
}

// cldStopped is si_code CLD_STOPPED (<linux/signal.h>), which x/sys does
// not define.
const cldStopped = 5

// giveBack makes gpuexec's group the foreground again if the job's group
// is, or a group of the job's that is gone (a job that moved the terminal
// to a group of its own, as a shell inside it does, and was killed), so
// that the shell gets the terminal back. A live group that is not the
// job's (the shell's, after bg) keeps it. gpuexec is in the background
// then: SIGTTOU is ignored for the moment of the call (no job process is
// started meanwhile, so nothing inherits that).
func (t *terminal) giveBack() {
	if t.fd < 0 {
		return
	}
	fg, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP)
	if err != nil || fg == t.own {
		return
	}
	if fg != t.job && !errors.Is(unix.Kill(-fg, 0), unix.ESRCH) {
		return
	}
	signal.Ignore(syscall.SIGTTOU)
	unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, t.own)
	signal.Reset(syscall.SIGTTOU)
}

// handOver gives the terminal to the job again, when gpuexec was continued
// in the foreground (fg); continued in the background (bg), the job runs
// in the background too.
func (t *terminal) handOver() {
	if t.fd < 0 {
		return
	}
	if fg, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP); err != nil || fg != t.own {
		return
	}
	unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, t.job)
}

// close stops watching, the sentinel too, and gives the terminal back.
func (t *terminal) close() {
	t.stopSentinel()
	if t.chld != nil {
		signal.Stop(t.chld)
	}
	t.giveBack()
}
