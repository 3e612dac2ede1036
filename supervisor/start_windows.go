//go:build windows

package supervisor

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/windows"
)

// startStatus is gpuexec's exit status when the job could not be started
// (err from exec.Cmd.Start, the command already resolved): 127 when it is
// gone, 125 when Windows lacks the handles or memory to start it
// (gpuexec's own failure, nothing said of the command), else 126: the
// file is not a program Windows can run.
func startStatus(err error) int {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ExitNotFound
	case errors.Is(err, windows.ERROR_TOO_MANY_OPEN_FILES), errors.Is(err, windows.ERROR_NOT_ENOUGH_MEMORY),
		errors.Is(err, windows.ERROR_OUTOFMEMORY), errors.Is(err, windows.ERROR_NO_SYSTEM_RESOURCES),
		errors.Is(err, windows.ERROR_COMMITMENT_LIMIT):
		return ExitFailed
	}
	return ExitCannotExec
}
