//go:build linux

package lock

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// vouch refuses the processes a sidecar names (they are not attributed to
// its sharer) when they are another user's than its file's owner, or a
// group its live gpuexec did not start; root's files, what cannot be read
// and a gone sharer's dead pid refuse nothing.
func TestVouch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make files and processes of another user (CI runs as root)")
	}
	const member = 4242
	as := func(uid int, argv ...string) (pid int, start int64) {
		t.Helper()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if uid != 0 {
			cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
		start, ok := proc.Start(cmd.Process.Pid)
		if !ok {
			t.Fatal("no start time")
		}
		return cmd.Process.Pid, start
	}
	rootJob, rootStart := as(0, "sleep", "600")
	memberJob, memberStart := as(member, "sleep", "600")
	// A member's process that leads a group it started: "gpuexec" and its
	// job's group.
	// A member's "gpuexec" (a shell) and the job it started, which leads
	// a group of its own (setsid, not a group leader, makes it in place).
	gx, gxStart := as(member, "sh", "-c", "setsid sleep 600 & wait")
	var job int
	testsupport.Await(t, 10*time.Second, "the job started by the shell", func() bool {
		children, pgrp := proc.Tree()
		for _, c := range children[gx] {
			if pgrp[c] == c {
				job = c
			}
		}
		return job > 0
	})
	t.Cleanup(func() { syscall.Kill(job, syscall.SIGKILL) })
	jobStart, _ := proc.Start(job)
	dead := testsupport.DeadPID(t)

	file := func(uid int) *os.File {
		t.Helper()
		p := filepath.Join(t.TempDir(), "gpu.lock.share-0000000000000001")
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	linked := func(uid int) *os.File {
		f := file(uid)
		if err := os.Link(f.Name(), f.Name()+"-link"); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, tc := range []struct {
		name  string
		owner int
		s     Sharer
		want  string // in the refusal; "" attributed
	}{
		{"root's file names anyone", 0, Sharer{PID: rootJob, ChildPGID: memberJob}, ""},
		{"its own pid", member, Sharer{PID: memberJob}, ""},
		{"root's pid", member, Sharer{PID: rootJob}, "names pid"},
		{"root's group", member, Sharer{PID: dead, ChildPGID: rootJob, ChildStart: rootStart}, "names process group"},
		{"root's group, gone", member, Sharer{PID: dead, ChildPGID: rootJob, ChildStart: rootStart, Gone: true}, "names process group"},
		{"a gone sharer's dead pid, now root's", member, Sharer{PID: rootJob, ChildPGID: memberJob, ChildStart: memberStart, Gone: true}, ""},
		{"a dead pid, its own group", member, Sharer{PID: dead, ChildPGID: memberJob, ChildStart: memberStart}, ""},
		{"its gpuexec and the group it started", member,
			Sharer{PID: gx, PIDStart: gxStart, ChildPGID: job, ChildStart: jobStart}, ""},
		{"its own group, started by another of its processes", member,
			Sharer{PID: gx, PIDStart: gxStart, ChildPGID: memberJob, ChildStart: memberStart}, "did not start"},
		{"on another host", member, Sharer{PID: rootJob, ChildPGID: rootJob, Host: "elsewhere.invalid"}, ""},
		{"names nothing", member, Sharer{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := vouch(file(tc.owner), tc.s)
			if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Errorf("vouch = %q, want %q", got, tc.want)
			}
		})
	}
	// A second name for a file, even root's, is nobody's sidecar.
	if got := vouch(linked(0), Sharer{PID: rootJob}); !strings.Contains(got, "2 links") {
		t.Errorf("vouch of a file with two names = %q", got)
	}
	// Nor is a file that others than its owner may write.
	f := file(0)
	if err := os.Chmod(f.Name(), 0o660); err != nil {
		t.Fatal(err)
	}
	if got := vouch(f, Sharer{PID: rootJob}); !strings.Contains(got, "written by others") {
		t.Errorf("vouch of a group-writable file = %q", got)
	}
	// What a file says of itself is never taken.
	if s, _ := parseSharer([]byte(`{"pid":7,"vramMiB":5,"unattributed":"","gone":true}`)); s.Unattributed != "" || s.Gone {
		t.Errorf("parseSharer took unattributed or gone from the file: %+v", s)
	}
	if s, _ := parseSharer([]byte(`{"pid":7,"vramMiB":5,"unattributed":"no"}`)); s.Unattributed != "" {
		t.Errorf("parseSharer took unattributed from the file: %+v", s)
	}
}
