//go:build linux

package cli

// Findings of the second red-team pass over issue 24's fixes (the merges
// of i24-fixshare and i24-fixperm), as black-box tests that fail on the
// branch they were found on.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gproc "github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// A member who runs nothing must not keep the card held by a file that
// names another user's job: here root's long-running job (a process group
// of its own, as a shell's job is), named by member A in a sidecar whose
// kernel lock nobody holds, or in a liveness file's note. Member B's job
// must get the free card. (Both are taken for a job whose record was
// removed and that "still runs": the card is held for as long as root's
// job runs, `status` says the planted sidecar "is locked", and `clear
// --force` refuses. The sidecar's owner is not the group's, which vouch
// tells, but a refused sidecar now keeps the lock held; a liveness file's
// note is believed with no owner check at all.)
func TestFileNamingAnotherUsersJobKeepsNothingHeld(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	for _, tt := range []struct {
		name, file string
		content    func(pgid int, start int64) string
	}{
		{"an unlocked sidecar", ".share-0123456789abcdef", func(pgid int, start int64) string {
			return fmt.Sprintf(`{"pid":999999,"owner":"root","slug":"train","host":%q,"childPgid":%d,"childStart":%d,"vramMiB":1,"since":"2026-01-01T00:00:00.000Z"}`,
				gproc.HostName(), pgid, start)
		}},
		{"a liveness file's note", ".live-0123456789abcdef", func(pgid int, start int64) string {
			return fmt.Sprintf("%d %d", pgid, start)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := sharedDir(t, os.ModeSetgid|0o775)
			lock := filepath.Join(dir, "gpu.lock")
			// Root's job: a group of its own in this session, as a
			// shell's job is (not a daemon's session).
			job := exec.Command("/bin/sleep", "300")
			job.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := job.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { job.Process.Kill(); job.Wait() })
			start, ok := gproc.Start(job.Process.Pid)
			if !ok {
				t.Fatal("cannot read root's job's start time")
			}
			planted := lock + tt.file
			plantIt := func() {
				t.Helper()
				memberA.run(t, fmt.Sprintf("umask 027; printf '%%s' '%s' > %s", tt.content(job.Process.Pid, start), planted))
			}
			plantIt()
			// What a real job's file would keep held after its gpuexec
			// is SIGKILLed is held only while the file is fresh (its
			// holder touched it at each heartbeat): --stale after its
			// last change, as a member could anyway with a record
			// naming a live pid. A short --stale shows the bound.
			st := startProc(t, gxUser(t, memberB, "022", nil, "status", "--lock", lock)).wait(t)
			if strings.Contains(st.stdout+st.stderr, "is locked") {
				t.Errorf("status says a file nobody holds is locked:\n%s%s", st.stdout, st.stderr)
			}
			r := startProc(t, gxUser(t, memberB, "022", nil, "--lock", lock, "--stale", "2s", "--heartbeat", "500ms", "--poll", "1s", "--wait", "10s", "--", "true")).wait(t)
			wantCode(t, r, 0)
			// And clear --force frees it at once.
			plantIt()
			wantCode(t, startProc(t, gxUser(t, memberB, "022", nil, "clear", "--force", "--lock", lock)).wait(t), 0)
			if lockExists(planted) {
				t.Errorf("clear --force left %s", filepath.Base(planted))
			}
			r = startProc(t, gxUser(t, memberB, "022", nil, "--lock", lock, "--poll", "1s", "--wait", "3s", "--", "true")).wait(t)
			wantCode(t, r, 0)
		})
	}
}

// A live waiter holds its ticket's kernel lock: that is proof of life
// whatever the ticket's mtime says. After the clock steps back (NTP's step
// at boot, `date -s`), every ticket's last heartbeat lies in the future
// until its waiter touches it again; here member B's ticket is dated a
// minute ahead (as a one-minute step back just after its heartbeat), and
// member C queues behind it. B must still be served first. (ahead prunes
// any ticket more than 10 s in the future, held or not: B's live ticket is
// removed, B queues again at the back, and C's job runs before B's.
// f91db50 kept B's place.)
func TestLiveWaiterWhoseTicketIsDatedAheadKeepsItsPlace(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	flags := filepath.Join(openDir(t), "flags")
	if err := os.Mkdir(flags, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(flags, 0o777)
	ready, release := filepath.Join(flags, "ready"), filepath.Join(flags, "release")
	ranB, cFirst := filepath.Join(flags, "b"), filepath.Join(flags, "c-before-b")

	holder := startProc(t, gxUser(t, memberA, "022", nil, "--lock", lock, "--poll", "1s", "--",
		"/bin/sh", "-c", "touch "+ready+"; while [ ! -e "+release+" ]; do sleep 0.05; done"))
	testsupport.Await(t, long, "member A's holder to start its job", func() bool { return lockExists(ready) })

	tickets := func() []string { m, _ := filepath.Glob(lock + ".ticket-*"); return m }
	b := startProc(t, gxUser(t, memberB, "022", nil, "--lock", lock, "--poll", "1s", "--heartbeat", "1m", "--", "touch", ranB))
	testsupport.Await(t, long, "member B's waiter to queue and write its ticket", func() bool {
		m := tickets()
		if len(m) != 1 {
			return false
		}
		fi, err := os.Stat(m[0])
		return err == nil && fi.Size() > 0 && strings.Contains(b.stderr(), "waiting for GPU lock")
	})
	ticketOfB := tickets()[0]
	ahead := time.Now().Add(time.Minute)
	if err := os.Chtimes(ticketOfB, ahead, ahead); err != nil {
		t.Fatal(err)
	}
	c := startProc(t, gxUser(t, memberC, "022", nil, "--lock", lock, "--poll", "1s", "--",
		"/bin/sh", "-c", "[ -e "+ranB+" ] || touch "+cFirst))
	testsupport.Await(t, long, "member C's waiter to queue and look at the queue", func() bool {
		return strings.Contains(c.stderr(), "waiting for GPU lock")
	})
	// C has looked at the queue under the guard before it says it waits.
	if !lockExists(ticketOfB) {
		t.Errorf("member C's waiter removed member B's live ticket %s", filepath.Base(ticketOfB))
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wantCode(t, holder.wait(t), 0)
	wantCode(t, b.wait(t), 0)
	wantCode(t, c.wait(t), 0)
	if lockExists(cFirst) {
		t.Errorf("member C's job ran before member B's, who queued first and waited all along; B said:\n%s", b.stderr())
	}
}

// The default folder <temp dir>/gpuexec that an older gpuexec made (f91db50
// made it 0755, in its first user's primary group) stays on disk after the
// upgrade. A user who shares that primary group (a site's "users" group)
// must still not be able to open its lock files: holding the guard defers
// every job of the owner ("held by another job" while status says free).
// (Only a folder gpuexec makes now is 0700; in one that is there, every
// file is 0640 in the folder's group, which the other user is in.)
func TestDefaultFolderOfAnOlderVersionIsPrivateToItsUser(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	cmd := gxUser(t, memberA, "022", nil, "--", "true")
	var tmp string
	for _, e := range cmd.Env {
		if v, ok := strings.CutPrefix(e, "TMPDIR="); ok {
			tmp = v
		}
	}
	old := filepath.Join(tmp, "gpuexec")
	if err := os.Mkdir(old, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(old, int(memberA.uid), int(memberA.gid)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, startProc(t, cmd).wait(t), 0)
	guard := filepath.Join(old, "gpu.lock.guard")
	if !lockExists(guard) {
		t.Fatalf("no guard at %s", guard)
	}
	if ok, out := flockAs(t, outsiderOfA, guard); ok || !strings.Contains(out, "Permission denied") {
		fi, _ := os.Stat(guard)
		t.Errorf("uid %d, who shares uid %d's primary group, could lock the guard of its default folder made by an older gpuexec (%v): %v %s",
			outsiderOfA.uid, memberA.uid, fi.Mode(), ok, out)
	}
}

// What is written in a shared record's liveness file (0660: every member
// may write it) is "never read for a job group" (docs/guarantees.md), yet
// once the record is gone the file is judged as a forced-clear holder's,
// note and all. Here member C holds a shared kernel lock on it (as a
// member may: it keeps the lock held only while C's process runs) and
// writes into it the group of root's long-running job; member A's sharer
// then leaves, which removes the record but not the file C holds; C's
// process ends. Nothing of C's runs and nothing of A's, yet member B's
// job waits for as long as root's job runs.
func TestNoteInASharedLivenessFileOutlivingItsRecordKeepsNothingHeld(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	jobs := openDir(t)
	c := newCard(t, rtx4090(0))
	env := fakeSMI(t, c)
	job := exec.Command("/bin/sleep", "300")
	job.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { job.Process.Kill(); job.Wait() })
	start, ok := gproc.Start(job.Process.Pid)
	if !ok {
		t.Fatal("cannot read root's job's start time")
	}

	a := startProc(t, gxUser(t, memberA, "022", env, append([]string{"--lock", lock, "--share", "--vram", "4G", "--"}, holdJob(filepath.Join(jobs, "a"))...)...))
	testsupport.Await(t, long, "member A's sharer to run", func() bool { return lockExists(filepath.Join(jobs, "a")) })
	lives, _ := filepath.Glob(lock + ".live-*")
	if len(lives) != 1 {
		t.Fatalf("liveness files: %v", lives)
	}
	held := filepath.Join(jobs, "c-holds")
	hold := exec.Command("flock", "-s", lives[0], "/bin/sh", "-c", fmt.Sprintf("printf '%d %d' > %s && touch %s && exec sleep 300", job.Process.Pid, start, lives[0], held))
	hold.SysProcAttr = memberC.credential()
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hold.Process.Kill(); hold.Wait() })
	testsupport.Await(t, long, "member C to hold the liveness file and write its note", func() bool { return lockExists(held) })
	a.cmd.Process.Signal(syscall.SIGTERM)
	wantCode(t, a.wait(t), 143)
	if lockExists(lock) || !lockExists(lives[0]) {
		t.Fatalf("after member A's sharer left: record there %v, liveness file there %v", lockExists(lock), lockExists(lives[0]))
	}
	for _, p := range append(childrenOf(hold.Process.Pid), hold.Process.Pid) {
		syscall.Kill(p, syscall.SIGKILL)
	}
	hold.Wait()
	r := startProc(t, gxUser(t, memberB, "022", env, "--lock", lock, "--poll", "1s", "--wait", "3s", "--", "true")).wait(t)
	wantCode(t, r, 0)
}

// In a sticky folder every user may write (the lock directly in /tmp), a
// shared record's liveness file was 0644 like every file there, so a sharer
// of another user joined it read-only, and its last close was no
// IN_CLOSE_WRITE: when it is SIGKILLed after the record's first sharer
// has left, the whole-card job behind waited for its next --poll (here:
// gave up after --wait 20s, 75), as item 10 of issue 24 found for group
// folders. It is 0666 there now, and the waiter looks at once; it then
// finds a stale record that only its owner or root may remove from a
// sticky folder, and says so (125), as it always has there.
func TestKilledSharerOfAnotherUserInAStickyFolderWakesTheWholeCardWaiter(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	r := killSharerBeforeAWholeCardWaiter(t, filepath.Join(openDir(t), "gpu.lock"), "20s")
	wantCode(t, r, 125)
	if !strings.Contains(r.stderr, "sticky: only a file's owner or root may remove it") {
		t.Errorf("the waiter did not look at once and say the sticky folder keeps it from clearing the stale lock:\n%s", r.stderr)
	}
}
