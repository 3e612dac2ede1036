//go:build linux

package proc

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v3/process"
)

// A process group whose only member is an unreaped zombie holds no GPU and
// must not keep a lock alive.
func TestGroupAliveIgnoresZombies(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	if !GroupAlive(pgid) {
		t.Fatal("running group judged dead")
	}
	cmd.Process.Kill()
	// Not reaped yet: a zombie.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, ok := ReadStat(pgid)
		if ok && st.State == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process did not become a zombie (state %c)", st.State)
		}
		time.Sleep(time.Millisecond)
	}
	if !groupSignalable(pgid) {
		t.Fatal("kill(-pgid, 0) should still reach the zombie")
	}
	if GroupAlive(pgid) {
		t.Fatal("a group of zombies judged alive")
	}
	cmd.Wait()
	if GroupAlive(pgid) || groupSignalable(pgid) {
		t.Fatal("reaped group still alive")
	}
}

// Start agrees with gopsutil's reading of the same process, which
// darwin and Windows builds use.
func TestProcessStartMatchesGopsutil(t *testing.T) {
	ms, ok := Start(os.Getpid())
	if !ok {
		t.Fatal("cannot read our own start time")
	}
	want, err := (&process.Process{Pid: int32(os.Getpid())}).CreateTime()
	if err != nil {
		t.Fatal(err)
	}
	if d := ms - want; d < -1000 || d > 1000 {
		t.Fatalf("start time %d, gopsutil says %d", ms, want)
	}
	if _, ok := Start(deadPID(t)); ok {
		t.Fatal("start time of a dead process")
	}
}

// deadPID is the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if Alive(cmd.Process.Pid) {
		t.Skip("pid reused at once")
	}
	return cmd.Process.Pid
}
