//go:build unix

package supervisor

import (
	"os"
	"os/exec"
)

// inheritLive passes the lock's liveness files to the child (fd 3 on), so
// that the kernel lock on it, which tells waiters the job is alive, is held
// for as long as the child or any descendant that keeps the file runs, even
// if gpuexec is killed.
func inheritLive(cmd *exec.Cmd, files []*os.File) {
	cmd.ExtraFiles = append(cmd.ExtraFiles, files...)
}
