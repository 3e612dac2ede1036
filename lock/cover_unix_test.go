//go:build unix

package lock

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gpuexec/gpuexec/internal/proc"
)

// A cover held only by a gone device holder's job (its gpuexec killed, its
// process group still running) is joined by a job for another device: that
// job's device is held by its own lock; and one whose liveness file was
// removed by hand is replaced, never an error.
func TestCoverOfAGoneHolderIsJoined(t *testing.T) {
	o := testOptions(t)
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	// A cover naming a dead pid, its liveness file unlocked, its job's
	// group (a sleep's, with its start) still running.
	job := exec.Command("sleep", "60")
	job.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { job.Process.Kill(); job.Wait() }()
	group := jobGroup{id: job.Process.Pid}
	group.since, _ = proc.Start(group.id)
	token := "0123456789abcdef"
	rec := &Info{PID: deadPID(t), AcquiredAt: "2026-10-12T12:18:03.512Z", Owner: "gone", Slug: "job", Token: token,
		ChildPGID: group.id, ChildStart: group.since, Cover: true}
	if err := os.WriteFile(o.Path, rec.encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(livePath(o.Path, token), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	dev := o
	dev.Devices = []string{"1"}
	h, err := TryAcquire(dev)
	if err != nil {
		t.Fatalf("a device job beside a cover kept by a gone holder's job: %v", err)
	}
	if c, err := parseRecord([]byte(mustRead(t, o.Path))); err != nil || c.Token != token {
		t.Errorf("the cover after joining: %+v, %v; want the same one, joined", c, err)
	}
	h.Release()

	os.Remove(livePath(o.Path, token))
	if err := os.WriteFile(o.Path, rec.encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err = TryAcquire(dev)
	if err != nil {
		t.Fatalf("a device job beside a cover without its liveness file: %v", err)
	}
	if c, err := parseRecord([]byte(mustRead(t, o.Path))); err != nil || c.Token == token || c.PID != os.Getpid() {
		t.Errorf("the cover after replacing it: %+v, %v; want a new one naming this process", c, err)
	}
	h.Release()
}
