//go:build unix

package signals

import (
	"os"
	"syscall"
)

// Caught are the signals gpuexec handles itself. SIGHUP and SIGQUIT are
// caught too: by default they would end gpuexec without releasing the lock
// and leave the job running in its own group.
var Caught = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

var names = map[syscall.Signal]string{
	syscall.SIGINT:  "SIGINT",
	syscall.SIGTERM: "SIGTERM",
	syscall.SIGHUP:  "SIGHUP",
	syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGKILL: "SIGKILL",
}
