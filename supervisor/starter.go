package supervisor

import (
	"os"
	"os/exec"
	"runtime"
)

// waited is how the child ended.
type waited struct {
	state *os.ProcessState
	err   error
}

// starter is a goroutine locked to an OS thread of its own that forks the
// child and keeps that thread alive until close: on Linux the child's
// parent-death signal fires when the thread that forked it ends. It is made
// before the lock is queued for, so that creating the thread and the
// runtime's checks before a first fork (see warmUp) are done by the time
// the lock is handed over, not after. The child is waited for on an
// ordinary goroutine, which hands its end to the watch loop without waking
// another thread.
type starter struct {
	cmds    chan *exec.Cmd
	started chan error
	end     chan struct{}
}

func newStarter() *starter {
	s := &starter{cmds: make(chan *exec.Cmd), started: make(chan error, 1), end: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread exits with this goroutine, at close.
		warmUp()
		select {
		case cmd := <-s.cmds:
			s.started <- cmd.Start()
		case <-s.end:
			return
		}
		<-s.end
	}()
	return s
}

// start starts cmd on the starter's thread; the channel delivers its end.
// Call at most once.
func (s *starter) start(cmd *exec.Cmd) (<-chan waited, error) {
	s.cmds <- cmd
	if err := <-s.started; err != nil {
		return nil, err
	}
	done := make(chan waited, 1)
	go func() {
		err := cmd.Wait()
		done <- waited{cmd.ProcessState, err}
	}()
	return done, nil
}

// close lets the starter's thread end. Call once the child is reaped and
// its group drained: on Linux the thread's end would kill a child still
// running.
func (s *starter) close() { close(s.end) }
