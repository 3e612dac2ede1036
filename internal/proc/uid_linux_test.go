//go:build linux

package proc

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

func TestParseUID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"Name:\tsleep\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\n", 1000, true},
		{"Name:\tsudo\nUid:\t1000\t0\t0\t0\n", 1000, true},
		{"Uid:\t0\t0\t0\t0\n", 0, true},
		{"Name:\tx\n", 0, false},
		{"Uid:\n", 0, false},
		{"Uid:\t-1\t0\n", 0, false},
		{"Uid:\tabc\n", 0, false},
	} {
		got, ok := parseUID([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseUID(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// The uid of a group is its leader's, or once the leader is gone, that of
// its members; of a group with no member, unknown.
func TestGroupUID(t *testing.T) {
	if uid, ok := UID(os.Getpid()); !ok || uid != os.Getuid() {
		t.Fatalf("UID(self) = %d, %v; want %d", uid, ok, os.Getuid())
	}
	want := os.Getuid()
	cred := (*syscall.Credential)(nil)
	if os.Geteuid() == 0 {
		want = 4321
		cred = &syscall.Credential{Uid: 4321, Gid: 4321}
	}
	// A leader that leaves a member of its group behind and exits.
	cmd := exec.Command("/bin/sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 &")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	if uid, ok := GroupUID(pgid); !ok || uid != want {
		t.Errorf("GroupUID(%d) with its leader gone = %d, %v; want %d", pgid, uid, ok, want)
	}
	leader := exec.Command("sleep", "600")
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leader.Process.Kill(); leader.Wait() })
	if uid, ok := GroupUID(leader.Process.Pid); !ok || uid != want {
		t.Errorf("GroupUID(%d) = %d, %v; want %d", leader.Process.Pid, uid, ok, want)
	}
	leader.Process.Kill()
	leader.Wait()
	if uid, ok := GroupUID(leader.Process.Pid); ok {
		t.Errorf("GroupUID of a group with no member = %d, true", uid)
	}
}
