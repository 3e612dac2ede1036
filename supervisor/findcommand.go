package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"syscall"
)

// findCommand finds the command as exec would, mapping failures to 126/127.
func findCommand(name string) (string, int, error) {
	path, err := exec.LookPath(name)
	switch {
	case err == nil:
		return path, 0, nil
	case errors.Is(err, fs.ErrPermission):
		return "", ExitCannotExec, fmt.Errorf("%s: command found but not executable", name)
	case errors.Is(err, syscall.EISDIR):
		return "", ExitCannotExec, fmt.Errorf("%s: is a folder, not a command", name)
	case errors.Is(err, exec.ErrDot):
		return "", ExitCannotExec, fmt.Errorf("%s: found only in the current folder; run it as ./%s", name, name)
	}
	if err := notRunnable(name); err != nil {
		return "", ExitCannotExec, err
	}
	return "", ExitNotFound, fmt.Errorf("%s: command not found", name)
}
