//go:build linux

package cli

// A member of the lock folder's group plants a sidecar of its own beside a
// shared lock ("<lock>.share-<token>", the file a sharer keeps its budget
// in), with a budget of 1 MiB and naming the processes of a memory hog
// that is not theirs: the hog's memory would count as a sharer's, within a
// 1 MiB budget, and a sharer that does not fit would be let in. The
// processes a sidecar names are its sharer's only when they are its file
// owner's (root's files only root makes); here the sidecar counts with its
// 1 MiB (as a real sharer whose processes are not taken for its own must,
// see TestSharerWhoseJobTakesRootIsStillCounted) but the hog's memory
// stays in use by others, status shows why its processes are not
// attributed, and it is left in place (its kernel lock is held, or the
// group it names runs).

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	procinfo "github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

func TestSidecarOfAMemberNamingAnotherUsersProcesses(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("needs util-linux flock")
	}
	// What the member names: the pid of its flock, root's hog (pid,
	// group, start), a group of its own (start), the record's token.
	type names struct {
		flock, hog, own    int
		hogStart, ownStart int64
		token              string
	}
	const tail = `"owner":"evil","slug":"fake","vramMiB":1,"since":"2026-01-01T00:00:00.000Z"`
	for _, tc := range []struct {
		name string
		held bool // the member holds the sidecar's kernel lock (flock FILE sleep)
		// attributed: the sidecar is the member's own (its processes
		// are). Either way it counts, but never with the hog's memory.
		attributed bool
		content    func(n names) string
	}{
		{"held, naming the hog's group", true, false, func(n names) string {
			return fmt.Sprintf(`{"pid":%d,"childPgid":%d,"childStart":%d,"lock":%q,`+tail+`}`, n.flock, n.hog, n.hogStart, n.token)
		}},
		{"not held, naming the hog's group (a gone sharer's job)", false, false, func(n names) string {
			return fmt.Sprintf(`{"pid":%d,"childPgid":%d,"childStart":%d,"lock":%q,`+tail+`}`, testsupport.DeadPID(t), n.hog, n.hogStart, n.token)
		}},
		{"held, naming the hog as its gpuexec", true, false, func(n names) string {
			return fmt.Sprintf(`{"pid":%d,"pidStart":%d,"lock":%q,`+tail+`}`, n.hog, n.hogStart, n.token)
		}},
		{"not held, naming a group of its own and the hog as its gone gpuexec", false, true, func(n names) string {
			return fmt.Sprintf(`{"pid":%d,"pidStart":%d,"childPgid":%d,"childStart":%d,"lock":%q,`+tail+`}`, n.hog, n.hogStart, n.own, n.ownStart, n.token)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to run a member of the folder's group (CI runs as root)")
			}
			dir := sharedDir(t, os.ModeSetgid|0o775)
			lock := filepath.Join(dir, "gpu.lock")

			// Root's memory hog, in a process group of its own.
			hog := exec.Command("sleep", "600")
			hog.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := hog.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Kill(-hog.Process.Pid, syscall.SIGKILL); hog.Wait() })
			hogStart, ok := procinfo.Start(hog.Process.Pid)
			if !ok {
				t.Fatal("cannot read the hog's start")
			}
			// 24 GiB card: the hog uses 12000 MiB, something else 500.
			c := newCard(t, rtx4090(12500, gputest.App{GPU: gputest.UUID0, PID: hog.Process.Pid, Name: "/usr/bin/python3", Used: "12000"}))

			a := startShared(t, c, lock, "--share", "--vram", "2G", "--slug", "a")
			awaitStarted(t, a)
			defer func() { wantCode(t, a.end(t), 0) }()

			fake := lock + ".share-00000000deadbeef"
			var flockPID int
			if tc.held {
				// The member creates the file and holds its kernel lock.
				shAs(t, userA, "027", "printf '' > '"+fake+"'")
				fl := exec.Command("flock", fake, "sleep", "600")
				asUser(t, fl, userA)
				fl.SysProcAttr.Setpgid = true
				if err := fl.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { syscall.Kill(-fl.Process.Pid, syscall.SIGKILL); fl.Wait() })
				flockPID = fl.Process.Pid
				testsupport.Await(t, long, "the member's flock on the sidecar", func() bool { return lockedByOther(t, fake) })
			}
			// A process group of the member's own.
			own := exec.Command("sleep", "600")
			asUser(t, own, userA)
			own.SysProcAttr.Setpgid = true
			if err := own.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Kill(-own.Process.Pid, syscall.SIGKILL); own.Wait() })
			ownStart, _ := procinfo.Start(own.Process.Pid)
			content := tc.content(names{flockPID, hog.Process.Pid, own.Process.Pid, hogStart, ownStart, readRecord(t, lock).Token})
			shAs(t, userA, "027", "printf '%s' '"+content+"' > '"+fake+"'")

			// 2.0 GiB (2049 MiB) of budgets, the member's 1 MiB
			// included, + 12.2 GiB in use by others (the hog's memory
			// is never the member's sharer's) + 9.0 GiB > 22.5 GiB.
			r := gx(t, c.env(), "--lock", lock, "--share", "--vram", "9G", "--wait", "0", "--slug", "b", "--", "true")
			wantCode(t, r, 75)
			if want := "budgets 2.0 GiB (2 sharer(s)) + 12.2 GiB in use by others + 9.0 GiB > 22.5 GiB"; !strings.Contains(r.stderr, want) {
				t.Errorf("the sharer's refusal does not say %q:\n%s", want, r.stderr)
			}

			human, m := statusOf(t, c, lock)
			t.Logf("status:\n%s", human)
			if len(sharersOf(m)) != 2 || m["budgetUsedMiB"] != float64(2049) {
				t.Errorf("status --json: sharers %v, budgetUsedMiB %v; want 2 sharers, 2049 MiB", m["sharers"], m["budgetUsedMiB"])
			}
			if m["notCounted"] != nil {
				t.Errorf("status --json still lists sidecars apart: %v", m["notCounted"])
			}
			var why []any
			for _, sh := range sharersOf(m) {
				if w, ok := sh.(map[string]any)["unattributed"]; ok {
					why = append(why, w)
				}
			}
			if len(why) != 1 && !tc.attributed || len(why) != 0 && tc.attributed {
				t.Errorf("status --json: unattributed %v, want it said of the member's sidecar alone: %t", why, !tc.attributed)
			}
			if !strings.Contains(human, "evil/fake (pid ") || strings.Contains(human, "its processes not attributed: ") == tc.attributed {
				t.Errorf("status does not show the member's sidecar with its processes attributed: %t:\n%s", tc.attributed, human)
			}
			if !strings.Contains(human, "(11.7 GiB) not under gpuexec") {
				t.Errorf("status does not show the hog's memory as no job's:\n%s", human)
			}
			if !strings.Contains(human, "runs as uid 0") && !tc.attributed {
				t.Errorf("status does not say the sidecar names root's processes:\n%s", human)
			}
			if _, err := os.Lstat(fake); err != nil {
				t.Errorf("the member's sidecar was removed although it is not provably dead: %v", err)
			}
		})
	}
}

// lockedByOther reports whether another process holds a kernel lock
// (flock) on path.
func lockedByOther(t *testing.T, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if err == nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return false
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatal(err)
	}
	return true
}

// A member's own sharer is counted, its job's processes attributed to it,
// both while its gpuexec runs and once it is SIGKILLed while its job runs
// on (a process of it that outlives the group's leader): its sidecar's
// owner is the user its processes run as.
func TestSidecarOfAMembersSharerCounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a member of the folder's group (CI runs as root)")
	}
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	c := memberCard(t, rtx4090(500))
	m := gxAs(t, userA, "002", c.memberEnv(t), "--lock", lock, "--share", "--vram", "2G", "--slug", "m", "--", "sh", "-c", "sleep 600 & wait")
	member := startProc(t, m)
	var pgid int
	t.Cleanup(func() {
		if pgid > 0 {
			syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
	testsupport.Await(t, long, "the member's sharer to note its job", func() bool {
		if member.exited() {
			t.Fatalf("the member's gpuexec exited:\n%s", member.stderr())
		}
		sh := sharersOf(testsupport.StatusJSON(t, long, gpuexecBin, lock))
		if len(sh) == 1 {
			f, _ := sh[0].(map[string]any)["childPgid"].(float64)
			pgid = int(f)
		}
		return pgid > 0
	})
	// The job's sleep (not its leader, the shell, which Linux ends with
	// its gpuexec) uses 3000 MiB of the 3500 in use.
	var worker int
	testsupport.Await(t, long, "the job's sleep", func() bool {
		_, pgrp := procinfo.Tree()
		for pid, g := range pgrp {
			if g == pgid && pid != pgid {
				worker = pid
			}
		}
		return worker > 0
	})
	c.set(rtx4090(3500, gputest.App{GPU: gputest.UUID0, PID: worker, Name: "/usr/bin/python3", Used: "3000"}))

	counted := func(when string) {
		t.Helper()
		r := gx(t, c.env(), "--lock", lock, "--share", "--vram", "21G", "--wait", "0", "--slug", "b", "--", "true")
		wantCode(t, r, 75)
		if want := "budgets 2.0 GiB (1 sharer(s)) + 500 MiB in use by others + 21.0 GiB > 22.5 GiB"; !strings.Contains(r.stderr, want) {
			t.Errorf("%s: the sharer's refusal does not say %q:\n%s", when, want, r.stderr)
		}
		human, st := statusOf(t, c, lock)
		sh := sharersOf(st)
		if len(sh) != 1 || sh[0].(map[string]any)["unattributed"] != nil || strings.Contains(human, "not attributed") {
			t.Errorf("%s: the member's sharer's processes are not attributed to it:\n%s", when, human)
		}
	}
	counted("while its gpuexec runs")
	m.Process.Signal(syscall.SIGKILL)
	member.wait(t)
	counted("its gpuexec SIGKILLed, its job running")
	syscall.Kill(-pgid, syscall.SIGKILL)
	testsupport.Await(t, long, "the lock free once the member's job is gone", func() bool {
		return testsupport.StatusJSON(t, long, gpuexecBin, lock)["state"] != "held"
	})
}

// memberCard is a card whose fixture the members of group gpu can read.
func memberCard(t *testing.T, f gputest.Fixture) *card {
	t.Helper()
	dir := t.TempDir()
	reachable(t, dir)
	c := &card{t: t, fixture: filepath.Join(dir, "smi.json")}
	c.set(f)
	return c
}

// memberEnv is env for a gpuexec run as another user: the fake nvidia-smi
// is a copy of this test binary that any user can run.
func (c *card) memberEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	memberSMI := forOtherUsers(t, helperBin, "nvidia-smi")
	return append([]string{gputest.Env + "=" + c.fixture, "GPUEXEC_NVIDIA_SMI=" + memberSMI}, extra...)
}
