//go:build windows

package supervisor

import (
	"os"
	"os/exec"
)

// inheritLive does nothing on Windows: the Job Object ends the whole job
// with gpuexec, so gpuexec's own hold on the liveness lock covers the job.
func inheritLive(*exec.Cmd, []*os.File) {}
