//go:build linux

package proc

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
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

// A group id is a pid, and so is reused once the job's group is gone: a
// group that leads its own session (a daemon's setsid) is never a job's,
// and with the job's start time known, a group led by a process started at
// another time (or a start before this boot) is not the job's either.
func TestGroupAliveSinceTellsTheJobsGroupFromAReusedNumber(t *testing.T) {
	start := func(attr *syscall.SysProcAttr) int {
		cmd := exec.Command("sleep", "300")
		cmd.SysProcAttr = attr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd.Process.Pid
	}
	job := start(&syscall.SysProcAttr{Setpgid: true})
	daemon := start(&syscall.SysProcAttr{Setsid: true})
	began, ok := Start(job)
	if !ok {
		t.Fatal("cannot read the job's start time")
	}
	for _, c := range []struct {
		name  string
		pgid  int
		since int64
		want  bool
	}{
		{"the job's group, start not known", job, 0, true},
		{"the job's group, started then", job, began, true},
		{"the job's group, a reading 0.5 s off", job, began + 500, true},
		{"a group led by a process started a minute later", job, began - 60_000, false},
		{"a start before this boot", job, bootTime() - 3_600_000, false},
		{"a daemon's group, leading its own session", daemon, 0, false},
	} {
		if got := GroupAliveSince(c.pgid, c.since); got != c.want {
			t.Errorf("%s: GroupAliveSince(%d, %d) = %v, want %v", c.name, c.pgid, c.since, got, c.want)
		}
	}
}

// RunOf and GroupRun tell a stopped process, and a group whose every
// member is stopped, from one that runs, and say Gone once it is reaped.
func TestRunTellsStoppedFromRunning(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 300 & exec sleep 300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	pid := cmd.Process.Pid
	began, ok := Start(pid)
	if !ok {
		t.Fatal("cannot read the leader's start time")
	}
	await := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: RunOf %d, GroupRun %d", what, RunOf(pid), GroupRun(pid, began))
			}
		}
	}
	// Once the leader is sleep, the shell has forked the other member:
	// before that, stopping the leader stops the whole group.
	execd := func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return err == nil && strings.TrimSpace(string(b)) == "sleep"
	}
	await("running", func() bool { return execd() && RunOf(pid) == Running && GroupRun(pid, began) == Running })
	// The leader alone stopped: the group still runs.
	syscall.Kill(pid, syscall.SIGSTOP)
	await("leader stopped", func() bool { return RunOf(pid) == Stopped && GroupRun(pid, began) == Running })
	syscall.Kill(-pid, syscall.SIGSTOP)
	await("group stopped", func() bool { return GroupRun(pid, began) == Stopped })
	if GroupRun(pid, began-60_000) != Gone {
		t.Error("a group led by a process started at another time is not the job's")
	}
	syscall.Kill(-pid, syscall.SIGCONT)
	await("continued", func() bool { return RunOf(pid) == Running && GroupRun(pid, began) == Running })
	syscall.Kill(-pid, syscall.SIGKILL)
	cmd.Wait()
	await("killed and reaped", func() bool { return RunOf(pid) == Gone && GroupRun(pid, began) == Gone })
	if RunOf(0) != Gone || RunOf(-1) != Gone {
		t.Error("no pid is Gone")
	}
}
