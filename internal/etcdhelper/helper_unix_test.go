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
	"github.com/gpuexec/gpuexec/lock"
)

// A user that goes away while its job's process group still runs leaves
// the lock held until the group ends, as a lock file would.
func TestAgentKeepsTheLockWhileTheJobRuns(t *testing.T) {
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
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { job.Wait(); close(exited) }()
	defer func() { job.Process.Kill(); <-exited }()
	if err := h.RecordChild(job.Process.Pid); err != nil {
		t.Fatal(err)
	}
	c := h.(*held).c
	c.w.Close() // the user is gone, without a release
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "keeping the lock until its job's process group ends") {
		if time.Now().After(deadline) {
			t.Fatalf("the helper did not keep the lock for the job:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond) // polling the log
	}
	file := fa.file(lock.Options{Path: agentURL}).Path
	r, err := lock.Inspect(lock.Options{Path: file})
	if err != nil || r.Locks[0].State != lock.StateHeld {
		t.Fatalf("lock while the job runs: %+v, %v", r, err)
	}
	syscall.Kill(-job.Process.Pid, syscall.SIGKILL)
	<-exited
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the helper did not finish after the job ended")
	}
	c.wait()
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file left after the job ended: %v", err)
	}
}
