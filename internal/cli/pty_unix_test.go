//go:build unix

package cli

import (
	"os"
	"os/exec"
	"testing"

	"github.com/creack/pty"
)

// startInPTY starts cmd in a pseudo-terminal of its own, of size (nil:
// pty's default), and returns the terminal and a channel closed once cmd
// has exited; cmd is killed and the terminal closed at the test's end. A
// machine without pseudo-terminals skips the test.
func startInPTY(t *testing.T, cmd *exec.Cmd, size *pty.Winsize) (tty *os.File, exited chan struct{}) {
	t.Helper()
	tty, err := pty.StartWithSize(cmd, size)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	exited = make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		tty.Close()
	})
	return tty, exited
}
