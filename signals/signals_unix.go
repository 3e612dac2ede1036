//go:build unix

package signals

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// catchable are the signals gpuexec handles itself unless they were
// ignored at start (see Caught). SIGHUP and SIGQUIT are caught too: by
// default they would end gpuexec without releasing the lock and leave the
// job running in its own group. SIGTSTP (Ctrl+Z, when the job does not
// have the terminal) and SIGCONT are caught so that the job's group stops
// and goes on with gpuexec: left to their defaults, gpuexec would stop
// alone and its job would run on.
var catchable = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGCONT}

const (
	stopSignal     = syscall.SIGTSTP
	continueSignal = syscall.SIGCONT
)

var names = map[syscall.Signal]string{
	syscall.SIGINT:  "SIGINT",
	syscall.SIGTERM: "SIGTERM",
	syscall.SIGHUP:  "SIGHUP",
	syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGKILL: "SIGKILL",
	syscall.SIGTSTP: "SIGTSTP",
	syscall.SIGCONT: "SIGCONT",
	syscall.SIGSTOP: "SIGSTOP",
}

// SurviveBrokenPipes keeps a write to a closed pipe (gpuexec's stderr or
// stdout read by `head`, a closed log pipe) from killing gpuexec: the write
// fails with EPIPE instead, the line is lost, and the job and the release go
// on. By default the Go runtime ends a program with SIGPIPE on such a write
// to stdout or stderr, leaving the lock behind. The signal is caught, not
// ignored: an ignored SIGPIPE would be inherited by the job across exec,
// and `yes | head` in a job must end as it does in a shell.
func SurviveBrokenPipes() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// accepted says what Parse takes, for its errors.
const accepted = "a name such as TERM, INT, HUP, KILL or USR1, or a number"

// byName is the signal named name (upper case, without SIG); 0 if none.
func byName(name string) syscall.Signal {
	if name == "" {
		return 0
	}
	return unix.SignalNum("SIG" + name)
}

// byNumber is signal n, if this system has one of that number; else 0.
func byNumber(n int) syscall.Signal {
	if n <= 0 || n > 255 || unix.SignalName(syscall.Signal(n)) == "" {
		return 0
	}
	return syscall.Signal(n)
}

// endsJob reports whether sig can be what stops a job: not a job-control
// signal.
func endsJob(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGCONT:
		return false
	}
	return true
}

// systemName is the system's name of a signal Name does not know; "" if
// none.
func systemName(s syscall.Signal) string { return unix.SignalName(s) }
