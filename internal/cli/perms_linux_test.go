//go:build linux

package cli

// What the modes of the lock's files let other users do (issue 24's red
// team, L1 and L3): black-box, the real binary run as several users.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	gproc "github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// A folder every user may write that is not sticky (2777, 0777) is
// refused in one line that gives the fix, before anything is made in it:
// anyone could put a guard open to all there and hold it. (Before, a
// 2777 folder was taken for a group folder: a stranger's 0666 guard made
// every member's job fail with "made by an older gpuexec?", and a folder
// with nothing planted was used.)
func TestFolderEveryUserMayWriteWithoutStickyIsRefused(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	for _, tt := range []struct {
		name  string
		mode  os.FileMode
		plant bool
	}{
		{"2777", os.ModeSetgid | 0o777, false},
		{"2777, a stranger's guard in it", os.ModeSetgid | 0o777, true},
		{"0777", 0o777, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := sharedDir(t, tt.mode)
			lock := filepath.Join(dir, "gpu.lock")
			if tt.plant {
				stranger.run(t, "umask 0; : > "+lock+".guard")
			}
			before := lockFiles(t, lock)
			r := startProc(t, gxUser(t, memberA, "022", nil, "--lock", lock, "--", "true")).wait(t)
			wantCode(t, r, 125)
			line := strings.TrimSpace(r.stderr)
			if strings.Count(line, "\n") != 0 || !strings.Contains(line, "not sticky") ||
				!strings.Contains(line, "chmod o-w "+dir) || !strings.Contains(line, "chmod +t "+dir) {
				t.Errorf("want one line with the fixes (chmod o-w, chmod +t), got:\n%s", r.stderr)
			}
			if after := lockFiles(t, lock); len(after) != len(before) {
				t.Errorf("files made in the refused folder: %v", after)
			}
		})
	}
}

// In a group folder only its owner may write a waiter's ticket or a
// holder's liveness file (0640): another member may probe them, never
// rewrite a ticket's record or the job group a holder noted. (They were
// 0660: any member could.)
func TestMembersCannotWriteAnotherMembersTicketOrLivenessFile(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	jobs := openDir(t)
	a := startProc(t, gxUser(t, memberA, "000", nil, append([]string{"--lock", lock, "--"}, holdJob(filepath.Join(jobs, "a"))...)...))
	testsupport.Await(t, long, "member A's job to run", func() bool { return lockExists(filepath.Join(jobs, "a")) })
	b := startProc(t, gxUser(t, memberB, "000", nil, "--lock", lock, "--wait", "1m", "--", "true"))
	tickets := func() []string { m, _ := filepath.Glob(lock + ".ticket-*"); return m }
	testsupport.Await(t, long, "member B's waiter to queue", func() bool { return len(tickets()) == 1 })
	lives, _ := filepath.Glob(lock + ".live-*")
	if len(lives) != 1 {
		t.Fatalf("liveness files: %v", lives)
	}
	for _, p := range []string{tickets()[0], lives[0]} {
		write := exec.Command("/bin/sh", "-c", ": >> "+p)
		write.SysProcAttr = memberC.credential()
		if out, err := write.CombinedOutput(); err == nil {
			fi, _ := os.Stat(p)
			t.Errorf("member C could open %s (%v) for writing", filepath.Base(p), fi.Mode())
		} else if !strings.Contains(string(out), "Permission denied") {
			t.Errorf("writing %s as member C: %v %s", filepath.Base(p), err, out)
		}
		read := exec.Command("/bin/cat", p)
		read.SysProcAttr = memberC.credential()
		if out, err := read.CombinedOutput(); err != nil {
			t.Errorf("member C cannot read %s, so cannot probe it: %v %s", filepath.Base(p), err, out)
		}
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantCode(t, a.wait(t), 143)
	wantCode(t, b.wait(t), 0)
}

// A shared record's liveness file is joined for writing by its sharers of
// every member (so that a sharer's death wakes a waiter at once): what is
// written in it is never read. Here member A's sharer and its job are
// SIGKILLed, and member C writes its own running process group into the
// shared record's liveness file as a noted job group: member B's
// whole-card job must still get the card. (It was believed: the dead
// record stayed held for as long as C's process ran.)
func TestGroupNotedInASharedLivenessFileKeepsNothingHeld(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	jobs := openDir(t)
	c := newCard(t, rtx4090(0))
	env := fakeSMI(t, c)
	a := startProc(t, gxUser(t, memberA, "022", env, append([]string{"--lock", lock, "--share", "--vram", "4G", "--"}, holdJob(filepath.Join(jobs, "a"))...)...))
	testsupport.Await(t, long, "member A's sharer to run", func() bool { return lockExists(filepath.Join(jobs, "a")) })
	lives, _ := filepath.Glob(lock + ".live-*")
	if len(lives) != 1 {
		t.Fatalf("liveness files: %v", lives)
	}
	killWithJobs(t, a, "member A's sharer")

	// Member C's process, leading a group of its own in the test's
	// session, as a job's first process does.
	sleeper := exec.Command("/bin/sleep", "300")
	sleeper.SysProcAttr = memberC.credential()
	sleeper.SysProcAttr.Setpgid = true
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	start, ok := gproc.Start(sleeper.Process.Pid)
	if !ok {
		t.Fatal("cannot read the sleeper's start time")
	}
	memberC.run(t, fmt.Sprintf("printf '%d %d' > %s", sleeper.Process.Pid, start, lives[0]))
	r := startProc(t, gxUser(t, memberB, "022", env, "--lock", lock, "--poll", "1s", "--wait", "5s", "--", "true")).wait(t)
	wantCode(t, r, 0)
}

// A file at a sidecar's name that nobody else may open (a member's `umask
// 777; : > gpu.lock.share-<16 hex>`) is a sharer whose budget is unknown,
// which keeps other sharers out, only while its mtime is fresh: one older
// than --stale, or more than 10 s in the future, is left out, and a sharer
// that fits joins. (It kept every sharer out for as long as it was there.)
func TestOldUnreadableFileAtASidecarsNameDoesNotKeepSharersOut(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	for _, tt := range []struct {
		name, touch string
		want        int
	}{
		{"fresh", "", 75},
		{"older than --stale", "touch -d 2000-01-01 ", 0},
		{"in the future", "touch -d 2099-01-01 ", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := sharedDir(t, os.ModeSetgid|0o775)
			lock := filepath.Join(dir, "gpu.lock")
			jobs := openDir(t)
			c := newCard(t, rtx4090(500))
			env := fakeSMI(t, c)
			b := startProc(t, gxUser(t, memberB, "022", env, append([]string{"--lock", lock, "--share", "--vram", "4G", "--"}, holdJob(filepath.Join(jobs, "b"))...)...))
			testsupport.Await(t, long, "member B's sharer to run", func() bool { return lockExists(filepath.Join(jobs, "b")) })
			planted := lock + ".share-0123456789abcdef"
			touch := ""
			if tt.touch != "" {
				touch = " && " + tt.touch + planted
			}
			memberA.run(t, "umask 777; : > "+planted+touch)
			r := startProc(t, gxUser(t, memberC, "022", env, "--lock", lock, "--share", "--vram", "4G", "--poll", "1s", "--wait", "2s", "--", "true")).wait(t)
			wantCode(t, r, tt.want)
			b.cmd.Process.Signal(syscall.SIGTERM)
			wantCode(t, b.wait(t), 143)
		})
	}
}
