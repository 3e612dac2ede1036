//go:build windows

package signals

import (
	"os"
	"syscall"
)

// Caught are the console events gpuexec handles itself: Ctrl+C and
// Ctrl+Break arrive as os.Interrupt; closing the console, logging off and
// shutting down arrive as SIGTERM.
var Caught = []os.Signal{os.Interrupt, syscall.SIGTERM}

var names = map[syscall.Signal]string{
	syscall.SIGINT:  "SIGINT",
	syscall.SIGTERM: "SIGTERM",
	syscall.SIGKILL: "SIGKILL",
}
