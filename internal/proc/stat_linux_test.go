//go:build linux

package proc

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
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
