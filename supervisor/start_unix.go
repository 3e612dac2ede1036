//go:build unix

package supervisor

import (
	"errors"
	"io/fs"
	"syscall"
)

// startStatus is gpuexec's exit status when the job could not be started
// (err from exec.Cmd.Start, the command already resolved): 127 when it is
// gone (fs.ErrNotExist, ENOTDIR), 126 when exec refuses the file itself (no
// permission, not a program, a folder, being written, an argument list too
// long), and 125 for everything else: gpuexec's own failure, such as too
// many open files (EMFILE, ENFILE), no memory or too many processes at the
// fork (ENOMEM, EAGAIN), none of which says anything of the command.
func startStatus(err error) int {
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return ExitNotFound
	case !errors.As(err, &errno):
		return ExitFailed
	}
	switch errno {
	case syscall.EACCES, syscall.EPERM, syscall.ENOEXEC, syscall.EISDIR, syscall.ETXTBSY,
		syscall.E2BIG, syscall.ELOOP, syscall.ENAMETOOLONG:
		return ExitCannotExec
	}
	return ExitFailed
}
