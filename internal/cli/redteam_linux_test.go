//go:build linux

package cli

// Findings of the red-team pass over issue 24's fixes, as black-box tests.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// In a sticky folder every user may write (the lock directly in /tmp,
// documented as working "as before"), a waiter's ticket is 0640 in its
// creator's primary group: another user cannot open it. A waiter of
// member B killed with SIGKILL leaves its ticket, which nobody else may
// remove (sticky). Member A's next job must still get the lock once the
// holder ends: a ticket whose kernel lock nobody holds is a dead waiter's.
// (f91db50 ran A's job at once; taking "cannot open" as "alive until its
// mtime is older than --stale" stalls the queue behind a crashed waiter
// for up to --stale, 1h30m by default, while the lock is free.)
func TestKilledWaiterOfAnotherUserInAStickyFolderDoesNotStallTheQueue(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := openDir(t)
	lock := filepath.Join(dir, "gpu.lock")
	flags := filepath.Join(openDir(t), "flags")
	if err := os.Mkdir(flags, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(flags, 0o777)
	ready, release := filepath.Join(flags, "ready"), filepath.Join(flags, "release")

	holder := startProc(t, gxUser(t, memberA, "022", nil, "--lock", lock, "--poll", "1s", "--",
		"/bin/sh", "-c", "touch "+ready+"; while [ ! -e "+release+" ]; do sleep 0.05; done"))
	testsupport.Await(t, long, "member A's holder to start its job", func() bool { return lockExists(ready) })

	tickets := func() []string { m, _ := filepath.Glob(lock + ".ticket-*"); return m }
	crashed := startProc(t, gxUser(t, memberB, "022", nil, "--lock", lock, "--poll", "1s", "--", "true"))
	testsupport.Await(t, long, "member B's waiter to queue", func() bool { return len(tickets()) == 1 })
	syscall.Kill(crashed.pid(), syscall.SIGKILL)
	testsupport.Await(t, long, "member B's waiter to die", crashed.exited)

	next := startProc(t, gxUser(t, memberA, "022", nil, "--lock", lock, "--poll", "1s", "--wait", "15s", "--", "true"))
	testsupport.Await(t, long, "member A's next job to queue", func() bool { return len(tickets()) == 2 })
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wantCode(t, holder.wait(t), 0)
	wantCode(t, next.wait(t), 0)
}

func init() {
	// setuid-root READY: what `sudo CMD` does as a job's first process
	// (this copy of the test binary is setuid root): takes real uid 0,
	// says it runs (the file READY), and runs until killed.
	helperRoles["setuid-root"] = func(args []string) int {
		if err := syscall.Setreuid(0, 0); err != nil {
			return 3
		}
		if err := os.WriteFile(args[0], nil, 0o644); err != nil {
			return 4
		}
		syscall.Exec("/bin/sleep", []string{"sleep", "300"}, os.Environ())
		return 5
	}
}

// A sharer whose job starts with a program that takes real uid 0 (sudo,
// su, a setuid-root tool) is a real sharer using its budget on the card.
// Its sidecar must still count (or at least keep others out): here two
// 10 GiB sharers hold a 24 GiB card, and a third 10 GiB sharer must not
// be let in. (vouch refuses the sidecar — "names process group N, which
// runs as uid 0" — and a refused sidecar counts for nothing, so the third
// is admitted: 30 GiB of budgets on a 24 GiB card. f91db50 counted it.)
func TestSharerWhoseJobTakesRootIsStillCounted(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	jobs := openDir(t)
	c := newCard(t, rtx4090(0))
	env := fakeSMI(t, c)
	suid := filepath.Join(filepath.Dir(sharedGpuexec(t)), "setuid-root")
	if err := copyFile(helperBin, suid, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	share := []string{"--lock", lock, "--share", "--vram", "10G", "--wait", "0", "--"}
	a := startProc(t, gxUser(t, memberA, "022", env, append(share, holdJob(filepath.Join(jobs, "a"))...)...))
	testsupport.Await(t, long, "member A's sharer to run", func() bool { return lockExists(filepath.Join(jobs, "a")) })
	b := startProc(t, gxUser(t, memberB, "022", append(env, role("setuid-root")), append(share, suid, filepath.Join(jobs, "b"))...))
	testsupport.Await(t, long, "member B's sharer (its job now real uid 0) to run", func() bool { return lockExists(filepath.Join(jobs, "b")) || b.exited() })
	if b.exited() {
		t.Fatalf("member B's sharer ended: %s", b.stderr())
	}
	t.Cleanup(func() {
		// B's job runs as root: its gpuexec may not signal it.
		killJobsOf(b.pid())
	})
	r := startProc(t, gxUser(t, memberA, "022", env, append(share, "true")...)).wait(t)
	wantCode(t, r, 75)
	a.cmd.Process.Signal(syscall.SIGTERM)
}

// killJobsOf kills the processes whose parent is pid (a job gpuexec pid
// started), by pid.
func killJobsOf(pid int) {
	for _, child := range childrenOf(pid) {
		syscall.Kill(child, syscall.SIGKILL)
	}
}

// killWithJobs SIGKILLs the gpuexec p, as a crash would, then the jobs it
// had started (by pid: they may run as a user it may not signal), and
// waits until all are gone; who names p in the waits' messages.
func killWithJobs(t *testing.T, p *proc, who string) {
	t.Helper()
	jobs := childrenOf(p.pid())
	syscall.Kill(p.pid(), syscall.SIGKILL)
	testsupport.Await(t, long, who+" to die", p.exited)
	for _, j := range jobs {
		syscall.Kill(j, syscall.SIGKILL)
	}
	testsupport.Await(t, long, who+"'s job to die", func() bool {
		for _, j := range jobs {
			if !testsupport.Gone(j) {
				return false
			}
		}
		return true
	})
}

// childrenOf are the pids of pid's children.
func childrenOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var child int
		if _, err := fmt.Sscan(e.Name(), &child); err != nil {
			continue
		}
		if st, ok := testsupport.ProcStat(child); ok && st.PPID == pid {
			out = append(out, child)
		}
	}
	return out
}

// A second name for a live sharer's sidecar (a member's `ln` where
// fs.protected_hardlinks=0, the setting issue 24's item 4 assumes; made
// by root here) must not make the sharer count for nothing: two 10 GiB
// sharers hold a 24 GiB card and a third must not be let in. (vouch
// refuses a sidecar with two links, and a refused sidecar counts for
// nothing: 30 GiB of budgets on the card. f91db50 counted it.)
func TestHardLinkToASharersSidecarDoesNotUncountIt(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	jobs := openDir(t)
	c := newCard(t, rtx4090(0))
	env := fakeSMI(t, c)
	share := []string{"--lock", lock, "--share", "--vram", "10G", "--wait", "0", "--"}
	a := startProc(t, gxUser(t, memberA, "022", env, append(share, holdJob(filepath.Join(jobs, "a"))...)...))
	testsupport.Await(t, long, "member A's sharer to run", func() bool { return lockExists(filepath.Join(jobs, "a")) })
	sidecars := func() []string { m, _ := filepath.Glob(lock + ".share-*"); return m }
	first := sidecars()
	b := startProc(t, gxUser(t, memberB, "022", env, append(share, holdJob(filepath.Join(jobs, "b"))...)...))
	testsupport.Await(t, long, "member B's sharer to run", func() bool { return lockExists(filepath.Join(jobs, "b")) })
	for _, s := range sidecars() {
		if len(first) == 1 && s != first[0] {
			if err := os.Link(s, filepath.Join(dir, "x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := startProc(t, gxUser(t, memberA, "022", env, append(share, "true")...)).wait(t)
	wantCode(t, r, 75)
	a.cmd.Process.Signal(syscall.SIGTERM)
	b.cmd.Process.Signal(syscall.SIGTERM)
}

// The default folder, <temp dir>/gpuexec, is made by gpuexec for its first
// user, and is meant to be private. Where that user's primary group is
// shared with others (a site's "users" group, gid 100), another user of
// that group must not be able to open its lock files: it could hold the
// guard and defer every job of the owner ("held by another job" while
// status says free). (safepath makes the folder 0755 in the creator's
// primary group, and FolderRule then makes every file 0640 in that group.)
func TestDefaultFolderIsPrivateToItsUser(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	cmd := gxUser(t, memberA, "022", nil, "--", "true")
	r := startProc(t, cmd).wait(t)
	wantCode(t, r, 0)
	var tmp string
	for _, e := range cmd.Env {
		if v, ok := strings.CutPrefix(e, "TMPDIR="); ok {
			tmp = v
		}
	}
	guard := filepath.Join(tmp, "gpuexec", "gpu.lock.guard")
	if !lockExists(guard) {
		t.Fatalf("no guard at %s", guard)
	}
	if ok, out := flockAs(t, outsiderOfA, guard); ok || !strings.Contains(out, "Permission denied") {
		fi, _ := os.Stat(guard)
		t.Errorf("uid %d, who shares uid %d's primary group, could lock its default folder's guard (%v): %v %s", outsiderOfA.uid, memberA.uid, fi.Mode(), ok, out)
	}
}

// A file at a sidecar's name that others may not open (a member's
// `umask 777; : > gpu.lock.share-<16 hex>`; no process of theirs runs)
// must not keep a shared lock whose holder and sharers are all gone held
// for ever: here member B's sharer is SIGKILLed with its job, member A
// plants such a file and runs nothing, and member C's whole-card job must
// still get the card. (An unreadable sidecar counts as a live sharer with
// no bound, and judge keeps the dead record held — "the jobs of its
// sharers still run: ?/? (pid 0)" — while a ticket that cannot be opened
// is bounded by --stale. f91db50 took the card.)
func TestUnreadableFileAtASidecarsNameDoesNotKeepADeadSharedLockHeld(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	jobs := openDir(t)
	c := newCard(t, rtx4090(0))
	env := fakeSMI(t, c)
	b := startProc(t, gxUser(t, memberB, "022", env, append([]string{"--lock", lock, "--share", "--vram", "4G", "--"}, holdJob(filepath.Join(jobs, "b"))...)...))
	testsupport.Await(t, long, "member B's sharer to run", func() bool { return lockExists(filepath.Join(jobs, "b")) })
	killWithJobs(t, b, "member B's sharer")

	memberA.run(t, "umask 777; : > "+lock+".share-0123456789abcdef")
	r := startProc(t, gxUser(t, memberC, "022", env, "--lock", lock, "--poll", "1s", "--wait", "5s", "--", "true")).wait(t)
	wantCode(t, r, 0)
}

// A ticket that cannot be opened is alive only until its mtime is older
// than --stale; one whose mtime is in the future (a member's `umask 777;
// : > gpu.lock.ticket-...01; touch -d 2099-01-01 ...`, with no process
// running) must not defer every job for ever. (ahead compares
// time.Since(mtime) > stale: a future mtime is never stale. f91db50 took
// the card: it took a ticket it cannot open for a dead one's.)
func TestUnreadableTicketFromTheFutureDoesNotStallTheQueue(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	ticket := lock + ".ticket-00000000000000000001"
	memberA.run(t, "umask 777; : > "+ticket+" && touch -d 2099-01-01 "+ticket)
	r := startProc(t, gxUser(t, memberC, "022", nil, "--lock", lock, "--poll", "1s", "--heartbeat", "1s", "--stale", "2s", "--wait", "6s", "--", "true")).wait(t)
	wantCode(t, r, 0)
}
