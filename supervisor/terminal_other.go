//go:build !linux

package supervisor

import (
	"os"
	"os/exec"
)

// terminal is a no-op outside Linux: the job never gets the terminal's
// foreground (where a stopped job cannot be told from a running one
// without reaping it, a shell could not get the terminal back after a
// Ctrl+Z), so it reads no terminal and Ctrl+C reaches it through gpuexec.
type terminal struct{}

func takeTerminal(*exec.Cmd, bool, bool) *terminal { return &terminal{} }
func (*terminal) started(int, int) error           { return nil }
func (*terminal) stopped() <-chan os.Signal        { return nil }
func (*terminal) heard() <-chan os.Signal          { return nil }
func (*terminal) listening() <-chan struct{}       { return nil }
func (*terminal) jobStopped() bool                 { return false }
func (*terminal) giveBack()                        {}
func (*terminal) handOver()                        {}
func (*terminal) pauseSentinel()                   {}
func (*terminal) stopSentinel()                    {}
func (*terminal) close()                           {}
