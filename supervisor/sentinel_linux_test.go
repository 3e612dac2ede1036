//go:build linux

package supervisor

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A sentinel reaped by someone else than its reader (drain's reap of every
// child, once stop gave up waiting for it) ends the reader quietly: no
// panic that would end gpuexec before it releases the lock.
func TestSentinelReapedElsewhere(t *testing.T) {
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	cmd.Stdout = outW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	cmd.Process.Kill()
	var ws unix.WaitStatus
	if _, err := unix.Wait4(cmd.Process.Pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	s := &sentinel{proc: cmd.Process, watched: []os.Signal{syscall.SIGINT},
		heard: make(chan os.Signal, 8), ready: make(chan struct{}), done: make(chan struct{})}
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		s.read(cmd, outR)
	}()
	select {
	case p := <-panicked:
		if p != nil {
			t.Fatalf("read panicked: %v", p)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("read did not end 20s after its process was reaped elsewhere")
	}
	select {
	case <-s.done:
	default:
		t.Error("done is not closed once read ended")
	}
}
