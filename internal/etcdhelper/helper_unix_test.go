//go:build unix

package etcdhelper

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testlog"
	"github.com/gpuexec/gpuexec/internal/testsupport"
	"github.com/gpuexec/gpuexec/lock"
)

// A user that goes away while its job still runs leaves the lock held
// until the job's processes are gone, as a lock file would: those of the
// job's process group (noted at the job's start, or recorded), and those
// that kept the liveness pipe the job inherited.
func TestAgentKeepsTheLockWhileTheJobRuns(t *testing.T) {
	for _, c := range []struct {
		name string
		// tell tells the lock of the job, started in a group of its
		// own: nil tells it nothing.
		tell    func(h lock.Locker, pgid int) error
		inherit bool // the job inherits the liveness pipe
	}{
		{"recorded group", func(h lock.Locker, pgid int) error { return h.RecordChild(pgid) }, false},
		{"noted group", func(h lock.Locker, pgid int) error { return h.(*held).NoteChild(pgid) }, false},
		{"inherited liveness pipe", nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			fa := fileAs{dir}
			inProcessAgent(t, fa)
			var logs testlog.Buffer
			h, err := viaHelper.Acquire(context.Background(), lock.Options{Path: agentURL, Logger: testlog.Logger(&logs)})
			if err != nil {
				t.Fatal(err)
			}
			job := exec.Command("sleep", "60")
			job.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if c.inherit {
				job.ExtraFiles = h.(*held).LiveFiles()
			}
			if err := job.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { job.Wait(); close(exited) }()
			defer func() { job.Process.Kill(); <-exited }()
			if c.tell != nil {
				if err := c.tell(h, job.Process.Pid); err != nil {
					t.Fatal(err)
				}
			}
			cn := h.(*held).c
			// The user is gone, without a release: its end of the
			// liveness pipe and of the helper's input close.
			cn.live.Close()
			cn.w.Close()
			testsupport.Await(t, 20*time.Second, "the helper to keep the lock for the job", func() bool {
				return strings.Contains(logs.String(), "keeping the lock until its job's processes are gone")
			})
			file := fa.file(lock.Options{Path: agentURL}).Path
			r, err := lock.Inspect(lock.Options{Path: file})
			if err != nil || r.Locks[0].State != lock.StateHeld {
				t.Fatalf("lock while the job runs: %+v, %v", r, err)
			}
			syscall.Kill(-job.Process.Pid, syscall.SIGKILL)
			<-exited
			select {
			case <-cn.done:
			case <-time.After(20 * time.Second):
				t.Fatal("the helper did not finish after the job ended")
			}
			<-cn.exited
			if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("lock file left after the job ended: %v", err)
			}
		})
	}
}
