//go:build linux

package etcdhelper

import (
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// procAttr puts the helper in a process group of its own, so that a
// Ctrl+C at the terminal, meant for gpuexec (which forwards it to its job
// and then releases the lock), does not kill the helper that holds the lock
// before it can release it; and has the kernel SIGKILL the helper if
// gpuexec dies (its parent-death signal), so that a helper that stopped
// answering does not outlive a gpuexec killed while it waited. A helper
// that must outlive a gpuexec killed outright (one holding a lock for the
// job's surviving processes) clears that signal itself (outliveUser).
func procAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// startTied starts cmd from an OS thread of its own, kept until untie is
// called (once the helper is reaped): Linux sends the parent-death signal
// when the thread that forked the child ends, not the process, and Go ends
// a thread whenever a goroutine locked to it exits, which may be a thread
// that once forked, as the supervisor's own starter thread does.
func startTied(cmd *exec.Cmd) (untie func(), err error) {
	started := make(chan error, 1)
	end := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread ends with this goroutine, after
		// untie.
		err := cmd.Start()
		started <- err
		if err == nil {
			<-end
		}
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return func() { close(end) }, nil
}

// outliveUser clears the parent-death signal gpuexec gave the helper
// (procAttr), so that the helper outlives a gpuexec killed outright and
// keeps a lock for the job's surviving processes. The signal belongs to
// the helper's main thread, the one its program was started on: call it
// there (the program locks its main goroutine to that thread in an init
// function). On any other thread it does nothing, which tests serving
// in-process rely on.
func outliveUser() {
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, 0, 0, 0, 0)
}
