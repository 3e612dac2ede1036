//go:build linux

package lock

import (
	"os"
	"os/exec"
	"strconv"
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
	if !groupAlive(pgid) {
		t.Fatal("running group judged dead")
	}
	cmd.Process.Kill()
	// Not reaped yet: a zombie.
	deadline := time.Now().Add(10 * time.Second)
	for {
		state, _, ok := procStat(strconv.Itoa(pgid))
		if ok && state == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process did not become a zombie (state %c)", state)
		}
		time.Sleep(time.Millisecond)
	}
	if !groupSignalable(pgid) {
		t.Fatal("kill(-pgid, 0) should still reach the zombie")
	}
	if groupAlive(pgid) {
		t.Fatal("a group of zombies judged alive")
	}
	cmd.Wait()
	if groupAlive(pgid) || groupSignalable(pgid) {
		t.Fatal("reaped group still alive")
	}
}

// processStart agrees with gopsutil's reading of the same process, which
// darwin and Windows builds use.
func TestProcessStartMatchesGopsutil(t *testing.T) {
	ms, ok := processStart(os.Getpid())
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
	if _, ok := processStart(deadPID(t)); ok {
		t.Fatal("start time of a dead process")
	}
}
