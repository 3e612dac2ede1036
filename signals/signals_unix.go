//go:build unix

package signals

import (
	"os"
	"os/signal"
	"syscall"
)

// Caught are the signals gpuexec handles itself. SIGHUP and SIGQUIT are
// caught too: by default they would end gpuexec without releasing the lock
// and leave the job running in its own group. SIGTSTP (Ctrl+Z, when the
// job does not have the terminal) and SIGCONT are caught so that the job's
// group stops and goes on with gpuexec: left to their defaults, gpuexec
// would stop alone and its job would run on.
var Caught = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGCONT}

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
