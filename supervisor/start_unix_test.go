//go:build unix

package supervisor

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// A command that cannot be started for want of resources (file
// descriptors, memory, processes) is gpuexec's failure, 125: 126 says the
// command is not executable, 127 that it is not found.
func TestStartFailureStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{syscall.EMFILE, ExitFailed},
		{syscall.ENFILE, ExitFailed},
		{syscall.ENOMEM, ExitFailed},
		{syscall.EAGAIN, ExitFailed},
		{syscall.EACCES, ExitCannotExec},
		{syscall.EPERM, ExitCannotExec},
		{syscall.ENOEXEC, ExitCannotExec},
		{syscall.EISDIR, ExitCannotExec},
		{syscall.ETXTBSY, ExitCannotExec},
		{syscall.ENOENT, ExitNotFound},
		{syscall.ENOTDIR, ExitNotFound},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			err := &os.PathError{Op: "fork/exec", Path: "/usr/bin/true", Err: tc.err}
			if got := startStatus(err); got != tc.want {
				t.Errorf("startStatus(%v) = %d, want %d", err, got, tc.want)
			}
			// As os/exec reports a pipe it could not make for the child.
			if tc.want == ExitFailed {
				if got := startStatus(fmt.Errorf("exec: %w", tc.err)); got != ExitFailed {
					t.Errorf("startStatus(wrapped %v) = %d, want %d", tc.err, got, ExitFailed)
				}
			}
		})
	}
}
