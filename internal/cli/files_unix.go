//go:build unix

package cli

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// minFiles is how many file descriptors gpuexec needs free to start: the
// runtime's poller takes two at the first file opened (and ends the
// process with a stack trace when it cannot have them), the lock takes a
// few per device (record, liveness file, guard, ticket, sidecar, the
// folder's watch), --log two, nvidia-smi and the job's start a pipe each.
// Short of these, a lock file that cannot be opened would read as
// something it is not; so gpuexec refuses to start instead.
const minFiles = 64

// enoughFiles says, before anything is opened, whether minFiles file
// descriptors are free under the limit (ulimit -n; the Go runtime has
// already raised the soft limit to the hard one): nil when they are, or
// cannot be told.
func enoughFiles() error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return nil
	}
	// The lowest free descriptor: how many are in use, as near as one
	// system call tells.
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.EMFILE):
		return fmt.Errorf("too few file descriptors: none is free under the limit of %d (ulimit -n); gpuexec needs %d", lim.Cur, minFiles)
	case errors.Is(err, unix.ENFILE):
		return fmt.Errorf("too few file descriptors: the system's file table is full; gpuexec needs %d", minFiles)
	case err != nil:
		return nil
	}
	unix.Close(fd)
	// RLIM_INFINITY is the largest figure of its type: never short.
	if limit := uint64(lim.Cur); limit < uint64(fd)+minFiles {
		return fmt.Errorf("too few file descriptors: %d free under the limit of %d (ulimit -n); gpuexec needs %d", limit-uint64(fd), limit, minFiles)
	}
	return nil
}
