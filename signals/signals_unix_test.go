//go:build unix

package signals

import (
	"syscall"
	"testing"
)

func TestCaughtNeverIncludesRuntimeSignals(t *testing.T) {
	for _, s := range Caught {
		if s == syscall.SIGURG || s == syscall.SIGCHLD || s == syscall.SIGKILL {
			t.Errorf("%v must never be caught", s)
		}
	}
}
