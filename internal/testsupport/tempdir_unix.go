//go:build unix

package testsupport

import (
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// setTempDir makes dir the temporary folder of this process and of those
// it starts.
func setTempDir(dir string) error { return os.Setenv("TMPDIR", dir) }

// removeEnv, set to a folder, makes a binary that links this package, as
// it starts, wait for its standard input to end, remove that folder and
// exit: OwnTempDir's remover.
const removeEnv = "GPUEXEC_TESTSUPPORT_REMOVE"

func init() {
	if dir := os.Getenv(removeEnv); dir != "" {
		os.Exit(remove(dir))
	}
}

// remover is the write end of the remover's standard input, open until this
// process ends.
var remover io.WriteCloser

// startRemover starts this binary as the remover of dir, in a process
// group of its own (a Ctrl+C or a signal to the test process's group leaves
// it to its work). Its standard input ends when this process has ended,
// however: nothing else holds the write end.
func startRemover(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), removeEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	remover = w
	return nil
}

// remove ignores a terminal's hangup and Ctrl+C, waits for the end of
// standard input and removes dir, trying again for a few seconds while
// processes the tests left still write there. It returns the exit status.
func remove(dir string) int {
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT)
	io.Copy(io.Discard, os.Stdin)
	for range 20 {
		if os.RemoveAll(dir) == nil {
			return 0
		}
		time.Sleep(250 * time.Millisecond)
	}
	return 1
}
