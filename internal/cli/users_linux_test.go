package cli

// Black-box tests of what other local users can and cannot do to a lock's
// folder: members of the folder's group (each with a primary group of
// their own), and users outside it, one of whom shares a member's primary
// group. They run as root (CI does), which starts gpuexec and util-linux's
// flock(1) as those users; nothing needs a passwd entry.

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// localUser is a uid with its primary group and supplementary groups.
type localUser struct {
	uid, gid uint32
	groups   []uint32
}

var (
	// Members of group gpu (groupGPU), each in a primary group of its own.
	memberA = localUser{uid: 4251, gid: 4252, groups: []uint32{groupGPU}}
	memberB = localUser{uid: 4253, gid: 4254, groups: []uint32{groupGPU}}
	memberC = localUser{uid: 4257, gid: 4258, groups: []uint32{groupGPU}}
	// Outside group gpu, but in member A's primary group: the files of a
	// folder without setgid would be theirs to open.
	outsiderOfA = localUser{uid: 4255, gid: memberA.gid}
	// Outside every group above.
	stranger = localUser{uid: 4259, gid: 4259}
)

func (u localUser) credential() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}}
}

// run runs the shell line script as u (planting a file, writing into one)
// and fails t if it fails.
func (u localUser) run(t *testing.T, script string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = u.credential()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as uid %d: %s: %v %s", u.uid, script, err, out)
	}
}

func needRootAndFlock(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run gpuexec and flock as other users (CI runs as root)")
	}
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("needs util-linux's flock(1)")
	}
}

// gxUser is gpuexec started as u with umask mask, through sh, which sets
// the umask and then becomes gpuexec (its pid is gpuexec's).
func gxUser(t *testing.T, u localUser, mask string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	needRootAndFlock(t)
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	cmd := exec.Command("/bin/sh", "-c", "umask "+mask+"; exec "+sharedGpuexec(t)+" "+strings.Join(quoted, " "))
	cmd.Env = testsupport.Env(append([]string{"TMPDIR=" + usersTmp(t)}, env...)...)
	cmd.SysProcAttr = u.credential()
	return cmd
}

// usersTmp is a sticky folder every user may write, for TMPDIR: nothing
// the users' processes make lands in /tmp.
func usersTmp(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmp")
	reachable(t, filepath.Dir(dir))
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// flockAs runs `flock -n -x path true` as u: whether u could open path
// and take its kernel lock, and what flock said.
func flockAs(t *testing.T, u localUser, path string) (bool, string) {
	t.Helper()
	cmd := exec.Command("flock", "-n", "-x", path, "true")
	cmd.SysProcAttr = u.credential()
	out, err := cmd.CombinedOutput()
	return err == nil, string(out)
}

// holdJob is a job that says it runs (the file ready) and then runs until
// it is killed.
func holdJob(ready string) []string {
	return []string{"/bin/sh", "-c", "touch " + ready + "; exec sleep 300"}
}

// openDir is a folder under the test's own that every user may write, for
// the files the users' jobs make.
func openDir(t *testing.T) string {
	t.Helper()
	return sharedDir(t, os.ModeSticky|0o777)
}

// lockFiles are the files beside the lock (lock, guard, liveness files,
// tickets, sidecars).
func lockFiles(t *testing.T, lock string) []string {
	t.Helper()
	all, err := filepath.Glob(lock + "*")
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// wantOutsiderLockedOut fails unless u can open none of the files beside
// lock, and each has no bits for others.
func wantOutsiderLockedOut(t *testing.T, u localUser, lock string, kinds ...string) {
	t.Helper()
	files := lockFiles(t, lock)
	for _, k := range kinds {
		found := false
		for _, f := range files {
			found = found || strings.HasPrefix(filepath.Base(f), filepath.Base(lock)+k)
		}
		if !found {
			t.Fatalf("no %q file beside the lock: %v", k, files)
		}
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o007 != 0 {
			t.Errorf("%s is %v: open to others", filepath.Base(f), fi.Mode())
		}
		if ok, out := flockAs(t, u, f); ok || !strings.Contains(out, "Permission denied") {
			t.Errorf("uid %d (gid %d) could lock %s (%v): %v %s", u.uid, u.gid, filepath.Base(f), fi.Mode(), ok, out)
		}
	}
}

// In a group folder (setgid, group gpu) a user outside group gpu — even
// one in a member's primary group — can open none of the lock's files, so
// an outsider's `flock -x` on the guard no longer defers every member's
// job; the members still queue and hand over to each other.
func TestOutsiderCannotOpenAGroupFoldersFiles(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	jobs := openDir(t)
	a := startProc(t, gxUser(t, memberA, "022", nil, append([]string{"--lock", lock, "--"}, holdJob(filepath.Join(jobs, "a"))...)...))
	testsupport.Await(t, long, "member A's job to run", func() bool { return lockExists(filepath.Join(jobs, "a")) })
	b := startProc(t, gxUser(t, memberB, "077", nil, "--lock", lock, "--wait", "1m", "--", "true"))
	testsupport.Await(t, long, "member B to queue", func() bool { return queueLen(t, lock) == 1 })

	wantOutsiderLockedOut(t, outsiderOfA, lock, "", ".guard", ".live-", ".ticket-")
	for _, f := range lockFiles(t, lock) {
		if fi, err := os.Stat(f); err == nil && fi.Sys().(*syscall.Stat_t).Gid != groupGPU {
			t.Errorf("%s is in group %d, want the folder's (%d)", filepath.Base(f), fi.Sys().(*syscall.Stat_t).Gid, groupGPU)
		}
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantCode(t, a.wait(t), 143)
	wantCode(t, b.wait(t), 0)

	// The case: an outsider holds the guard with flock(1) (it
	// cannot open it: flock ends at once), and a member's job runs.
	out := startProc(t, func() *exec.Cmd {
		cmd := exec.Command("flock", "-x", lock+".guard", "sleep", "60")
		cmd.SysProcAttr = outsiderOfA.credential()
		return cmd
	}())
	r := startProc(t, gxUser(t, memberA, "022", nil, "--lock", lock, "--wait", "5s", "--", "true")).wait(t)
	wantCode(t, r, 0)
	if !out.exited() {
		t.Error("the outsider's flock holds the guard")
	}
}

// In a private folder — the default one, <tmp>/gpuexec, made by its first
// user — nobody outside the folder's group can open the lock's files.
func TestOutsiderCannotOpenAPrivateFoldersFiles(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	tmp := usersTmp(t)
	jobs := openDir(t)
	env := []string{"TMPDIR=" + tmp}
	a := startProc(t, gxUser(t, memberA, "022", env, append([]string{"--"}, holdJob(filepath.Join(jobs, "a"))...)...))
	testsupport.Await(t, long, "member A's job to run", func() bool { return lockExists(filepath.Join(jobs, "a")) })
	lock := filepath.Join(tmp, "gpuexec", "gpu.lock")
	wantOutsiderLockedOut(t, stranger, lock, "", ".guard", ".live-")
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantCode(t, a.wait(t), 143)
}

// A guard made open to others by an older gpuexec is tightened by its
// owner; anyone else gets one line saying so and what to run, exit 125,
// and is never told the lock is held.
func TestLooseGuardOfAnOlderVersion(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	guard := lock + ".guard"
	memberA.run(t, "umask 0; : > "+guard+" && chmod 0664 "+guard)
	r := startProc(t, gxUser(t, memberB, "022", nil, "--lock", lock, "--wait", "5s", "--", "true")).wait(t)
	wantCode(t, r, 125)
	if l := lines(r.stderr); len(l) != 1 || !strings.Contains(r.stderr, guard) || !strings.Contains(r.stderr, "chmod o-rwx") {
		t.Errorf("member B was not told in one line what to do about the loose guard:\n%s", r.stderr)
	}
	r = startProc(t, gxUser(t, memberA, "022", nil, "--lock", lock, "--wait", "5s", "--", "true")).wait(t)
	wantCode(t, r, 0)
	if fi, err := os.Stat(guard); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("the guard's owner left it %v (%v), want 0660", fi.Mode(), err)
	}
	r = startProc(t, gxUser(t, memberB, "022", nil, "--lock", lock, "--wait", "5s", "--", "true")).wait(t)
	wantCode(t, r, 0)
	// A guard this member cannot open at all is an error naming the
	// folder, not a lock held by another job.
	if err := os.Chmod(guard, 0o600); err != nil {
		t.Fatal(err)
	}
	r = startProc(t, gxUser(t, memberB, "022", nil, "--lock", lock, "--wait", "5s", "--", "true")).wait(t)
	wantCode(t, r, 125)
	if l := lines(r.stderr); len(l) != 1 || !strings.Contains(r.stderr, "cannot use the lock folder "+dir) {
		t.Errorf("an unopenable guard is not one line naming the folder:\n%s", r.stderr)
	}
}

// A folder its group may write but without setgid would give each file
// its creator's primary group, which other members may not be in (and
// outsiders may): it is refused with one line saying how to fix it.
func TestGroupFolderWithoutSetgidIsRefused(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, 0o775)
	lock := filepath.Join(dir, "gpu.lock")
	for _, args := range [][]string{
		{"--lock", lock, "--wait", "5s", "--", "true"},
	} {
		r := startProc(t, gxUser(t, memberA, "022", nil, args...)).wait(t)
		wantCode(t, r, 125)
		if l := lines(r.stderr); len(l) != 1 || !strings.Contains(r.stderr, "chmod g+s "+dir) || !strings.Contains(r.stderr, "chgrp") {
			t.Errorf("%v: not one line with the recipe:\n%s", args, r.stderr)
		}
	}
	if files := lockFiles(t, lock); len(files) != 0 {
		t.Errorf("files made in the refused folder: %v", files)
	}
}

// A live waiter's ticket that a member cannot open (made by a user whose
// mode left the group out) is not taken for a dead one: the member waits
// behind it and leaves it in place. (--wait 1s: a head that leaves a free
// lock untaken for headGrace, 2 s, is passed, though it keeps its place.)
func TestTicketThatCannotBeOpenedIsNotDead(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	ticket := lock + ".ticket-00000000000000000001"
	ready := filepath.Join(openDir(t), "ready")
	cmd := exec.Command("/bin/sh", "-c", "umask 077; : > "+ticket+" && exec flock -x "+ticket+" sh -c 'touch "+ready+"; exec sleep 300'")
	cmd.SysProcAttr = memberA.credential()
	waiter := startProc(t, cmd)
	testsupport.Await(t, long, "member A's waiter to lock its ticket", func() bool { return lockExists(ready) })
	r := startProc(t, gxUser(t, memberB, "022", nil, "--lock", lock, "--wait", "1s", "--", "true")).wait(t)
	wantCode(t, r, 75)
	if !lockExists(ticket) {
		t.Error("member B removed member A's live ticket")
	}
	waiter.cmd.Process.Kill()
}

// fakeSMI is a copy of this test binary that any user can run as the fake
// nvidia-smi, and c's fixture made readable to all.
func fakeSMI(t *testing.T, c *card) []string {
	t.Helper()
	smiBin := forOtherUsers(t, helperBin, "nvidia-smi")
	reachable(t, filepath.Dir(c.fixture))
	if err := os.Chmod(filepath.Dir(c.fixture), 0o777); err != nil {
		t.Fatal(err)
	}
	env := c.env()
	for i, e := range env {
		if strings.HasPrefix(e, "GPUEXEC_NVIDIA_SMI=") {
			env[i] = "GPUEXEC_NVIDIA_SMI=" + smiBin
		}
	}
	return env
}

// A sharer of another member, SIGKILLed with its job, hands the card to
// the whole-card job waiting behind it at once (the kernel reports its
// liveness file's last close), not at the waiter's next poll.
func TestKilledSharerOfAnotherUserWakesTheWholeCardWaiter(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSetgid|0o775)
	r := killSharerBeforeAWholeCardWaiter(t, filepath.Join(dir, "gpu.lock"), "5m")
	wantCode(t, r, 0)
}

// killSharerBeforeAWholeCardWaiter runs two sharers of members A and B on
// lock, queues member C's whole-card job behind them (--poll 10m: only
// the kernel's word wakes it within the test, --wait wait), lets A leave,
// checks that C still waits, SIGKILLs B's gpuexec and returns how C's job
// ended.
func killSharerBeforeAWholeCardWaiter(t *testing.T, lock, wait string) result {
	t.Helper()
	jobs := openDir(t)
	c := newCard(t, rtx4090(500))
	env := fakeSMI(t, c)
	a := startProc(t, gxUser(t, memberA, "022", env, append([]string{"--lock", lock, "--share", "--vram", "4G", "--"}, holdJob(filepath.Join(jobs, "a"))...)...))
	testsupport.Await(t, long, "member A's sharer to run", func() bool { return lockExists(filepath.Join(jobs, "a")) })
	b := startProc(t, gxUser(t, memberB, "022", env, append([]string{"--lock", lock, "--share", "--vram", "4G", "--"}, holdJob(filepath.Join(jobs, "b"))...)...))
	testsupport.Await(t, long, "member B's sharer to run", func() bool { return lockExists(filepath.Join(jobs, "b")) })
	// The whole-card waiter looks again only every 10 minutes: only the
	// kernel's word wakes it within the test.
	w := startProc(t, gxUser(t, memberC, "022", env, "--lock", lock, "--poll", "10m", "--report", "500ms", "--wait", wait, "--", "true"))
	testsupport.Await(t, long, "the whole-card job to queue", func() bool { return queueLen(t, lock) == 1 })
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantCode(t, a.wait(t), 143)
	// Whatever A's leaving woke the waiter for has been looked at once
	// it has said where it stands twice more.
	n := strings.Count(w.stderr(), "waiting for GPU lock")
	testsupport.Await(t, long, "the waiter to look again", func() bool { return strings.Count(w.stderr(), "waiting for GPU lock") >= n+2 })
	if w.exited() {
		t.Fatalf("the whole-card job ended beside member B's sharer:\n%s", w.stderr())
	}
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	b.wait(t)
	killed := time.Now()
	r := w.wait(t)
	t.Logf("after %s:\n%s", time.Since(killed), r.stderr)
	return r
}

// clear and status, run by a user who may not read the sharers' sidecars
// (an older gpuexec's, 0640 in a sticky folder), still count every sharer (their budgets unknown), never "0 MiB of
// budgets by 0 job(s)" while two hold the card.
func TestClearOfASharedLockCountsSharersItCannotRead(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSticky|0o777)
	lock := filepath.Join(dir, "gpu.lock")
	jobs := openDir(t)
	c := newCard(t, rtx4090(500))
	env := fakeSMI(t, c)
	// Members A and B share their primary group, gpu: each may join the
	// other's liveness file in this sticky folder.
	a1 := localUser{uid: userA, gid: groupGPU}
	b1 := localUser{uid: userB, gid: groupGPU}
	a := startProc(t, gxUser(t, a1, "022", env, append([]string{"--lock", lock, "--share", "--vram", "4G", "--"}, holdJob(filepath.Join(jobs, "a"))...)...))
	testsupport.Await(t, long, "A's sharer to run", func() bool { return lockExists(filepath.Join(jobs, "a")) })
	b := startProc(t, gxUser(t, b1, "022", env, append([]string{"--lock", lock, "--share", "--vram", "6G", "--"}, holdJob(filepath.Join(jobs, "b"))...)...))
	testsupport.Await(t, long, "B's sharer to run", func() bool { return lockExists(filepath.Join(jobs, "b")) })
	// gpuexec makes them 0644 in a sticky folder now; an older one made
	// them 0640 in their creator's group, which the stranger is not in.
	sidecars, _ := filepath.Glob(lock + ".share-*")
	if len(sidecars) != 2 {
		t.Fatalf("sidecars: %v", sidecars)
	}
	for _, p := range sidecars {
		if err := os.Chmod(p, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"clear", "--lock", lock}, {"status", "--lock", lock}} {
		r := startProc(t, gxUser(t, stranger, "022", env, args...)).wait(t)
		all := r.stdout + r.stderr
		if !strings.Contains(all, "shared: unknown of budgets by 2 job(s)") || strings.Count(all, "may not read: budget unknown") != 2 {
			t.Errorf("%v as another user (%d):\n%s", args, r.code, all)
		}
	}
	for _, p := range []*proc{a, b} {
		p.cmd.Process.Signal(syscall.SIGTERM)
		wantCode(t, p.wait(t), 143)
	}
}

// A counter in the guard at the top of the arrival numbers (any value a
// member may write there) never hands out a ticket that the queue cannot
// see: the waiter is listed, in order, and served.
func TestTicketCounterAtTheTop(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	ready := filepath.Join(t.TempDir(), "ready")
	h := startProc(t, gpuexecCmd(nil, append([]string{"--lock", lock, "--"}, holdJob(ready)...)...))
	testsupport.Await(t, long, "the holder's job to run", func() bool { return lockExists(ready) })
	for _, counter := range []uint64{1<<62 - 1, 1<<62 - 2, 1 << 63} {
		f, err := os.OpenFile(lock+".guard", os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], counter)
		_, err = f.WriteAt(b[:], 0)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		w1 := startProc(t, gpuexecCmd(nil, "--lock", lock, "--wait", "1m", "--", "true"))
		testsupport.Await(t, long, fmt.Sprintf("the first waiter listed (counter %d)", counter), func() bool { return queueLen(t, lock) == 1 })
		w2 := startProc(t, gpuexecCmd(nil, "--lock", lock, "--wait", "1m", "--", "true"))
		testsupport.Await(t, long, fmt.Sprintf("the second waiter listed (counter %d)", counter), func() bool { return queueLen(t, lock) == 2 })
		q, _ := testsupport.StatusJSON(t, long, gpuexecBin, lock)["queue"].([]any)
		if len(q) == 2 {
			first, _ := q[0].(map[string]any)
			if pid, _ := first["pid"].(float64); int(pid) != w1.pid() {
				t.Errorf("counter %d: the queue's first is pid %v, want the first waiter %d: %v", counter, pid, w1.pid(), q)
			}
		}
		w1.cmd.Process.Signal(syscall.SIGTERM)
		w2.cmd.Process.Signal(syscall.SIGTERM)
		w1.wait(t)
		w2.wait(t)
		testsupport.Await(t, long, "the queue empty", func() bool { return queueLen(t, lock) == 0 })
	}
	h.cmd.Process.Signal(syscall.SIGTERM)
	wantCode(t, h.wait(t), 143)
}

// A guard that is a second name of a member's file elsewhere (a hard link
// planted where fs.protected_hardlinks is off) is refused, and that file's
// mode and group are never changed: tightening an older guard touches
// only a file with one name.
func TestGuardLinkedElsewhereIsNeverChanged(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("key\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(secret, int(memberA.uid), int(memberA.gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(secret, lock+".guard"); err != nil {
		t.Fatal(err)
	}
	r := startProc(t, gxUser(t, memberA, "022", nil, "--lock", lock, "--wait", "5s", "--", "true")).wait(t)
	wantCode(t, r, 125)
	if !strings.Contains(r.stderr, "2 names") {
		t.Errorf("the linked guard was not refused as such:\n%s", r.stderr)
	}
	fi, err := os.Stat(secret)
	if err != nil || fi.Mode().Perm() != 0o400 || fi.Sys().(*syscall.Stat_t).Gid != memberA.gid {
		t.Errorf("the member's file is now %v, group %d (%v)", fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid, err)
	}
}
