//go:build windows

package signals

import (
	"os"
	"syscall"
)

// Caught are the console events gpuexec handles itself: Ctrl+C and
// Ctrl+Break arrive as os.Interrupt (exit 130 while waiting); closing the
// console, logging off and shutting down arrive as SIGTERM (143). For
// those three, Go's console handler does not return (returning would let
// Windows end the process at once), so gpuexec stops its job as for any
// SIGTERM until Windows ends it when the event's time is up (about 5 s for
// a close); the Job Object then takes the job along.
var Caught = []os.Signal{os.Interrupt, syscall.SIGTERM}

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
