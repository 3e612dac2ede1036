//go:build windows

package signals

import (
	"os"
	"syscall"
)

// catchable are the console events gpuexec handles itself (see Caught): Ctrl+C and
// Ctrl+Break arrive as os.Interrupt (exit 130 while waiting); closing the
// console, logging off and shutting down arrive as SIGTERM (143). For
// those three, Go's console handler does not return (returning would let
// Windows end the process at once), so gpuexec stops its job as for any
// SIGTERM until Windows ends it when the event's time is up (about 5 s for
// a close); the Job Object then takes the job along.
var catchable = []os.Signal{os.Interrupt, syscall.SIGTERM}

var names = map[syscall.Signal]string{
	syscall.SIGINT:  "SIGINT",
	syscall.SIGTERM: "SIGTERM",
	syscall.SIGKILL: "SIGKILL",
}

// Windows has no job-control signals: no signal value is a stop or a
// continue.
var (
	stopSignal     os.Signal = nil
	continueSignal os.Signal = nil
)

// SurviveBrokenPipes does nothing on Windows: a write to a closed pipe
// fails with an error there, and never ends the process.
func SurviveBrokenPipes() {}

// accepted says what Parse takes, for its errors.
const accepted = "TERM or INT (Ctrl+Break to the job) or KILL (the Job Object is terminated at once) on Windows"

// byName is the signal named name (upper case, without SIG) that gpuexec
// can send on Windows; 0 if none.
func byName(name string) syscall.Signal {
	switch name {
	case "INT":
		return syscall.SIGINT
	case "TERM":
		return syscall.SIGTERM
	case "KILL":
		return syscall.SIGKILL
	}
	return 0
}

// byNumber is signal n if gpuexec can send it on Windows; else 0.
func byNumber(n int) syscall.Signal {
	switch s := syscall.Signal(n); s {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL:
		return s
	}
	return 0
}

// endsJob: every signal byName and byNumber return ends a job.
func endsJob(syscall.Signal) bool { return true }

// systemName: Windows names no other signals.
func systemName(syscall.Signal) string { return "" }
