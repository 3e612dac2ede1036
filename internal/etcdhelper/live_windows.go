//go:build windows

package etcdhelper

import (
	"errors"
	"io"
	"os"
	"os/exec"
)

// livePipe makes no liveness pipe on Windows: the job runs in a Job
// Object that ends with its user, so the user's end of the helper's input
// covers the job.
func livePipe(*exec.Cmd) (r, w *os.File, err error) { return nil, nil, nil }

// InheritedLive fails on Windows, where users pass no liveness pipe.
func InheritedLive() (io.ReadCloser, error) {
	return nil, errors.New("lock: a liveness pipe is not passed on Windows")
}
