//go:build unix

package etcdhelper

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// liveFD is the helper's descriptor of its liveness pipe: the first after
// stdin, stdout and stderr (exec.Cmd.ExtraFiles[0]).
const liveFD = 3

// livePipe makes the liveness pipe of a helper that is to hold a lock: the
// read end goes to cmd as descriptor liveFD (close it once cmd started),
// the write end stays with the user, whose job inherits it. Both are
// close-on-exec here: no other child of the user gets either.
func livePipe(cmd *exec.Cmd) (r, w *os.File, err error) {
	if len(cmd.ExtraFiles) != 0 {
		return nil, nil, errors.New("lock: the helper's liveness pipe must be its first extra descriptor")
	}
	if r, w, err = os.Pipe(); err != nil {
		return nil, nil, err
	}
	cmd.ExtraFiles = []*os.File{r}
	return r, w, nil
}

// InheritedLive is the helper's end of the liveness pipe its user passed
// (a hold request with live set): descriptor 3, once checked to be a pipe.
// Anything else there is an error, and the descriptor is left alone.
func InheritedLive() (io.ReadCloser, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(liveFD, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil, errors.New("lock: gpuexec passed a liveness pipe, but the helper's descriptor 3 is not a pipe")
	}
	return os.NewFile(liveFD, "liveness pipe"), nil
}
