package cli

// Black-box tests of the job journal through the real binary: a scripted
// day of jobs (runDay, theDay: reusable by the report's tests), the
// outcomes the day does not have, 200 writers at once, a journal that
// cannot be written, one in a group folder.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// dayOwner is the --owner of every job of the scripted day but the
// SIGKILLed holder (holderOwner, of startHolder).
const dayOwner = "day"

// dayJob is what the journal must say of one job of the scripted day.
type dayJob struct {
	Slug    string
	Outcome journal.Outcome
	Status  int
	Signal  string
	Started bool  // it took the lock
	Share   bool  // --share
	VRAMMiB int64 // --vram
	// TimeoutMS is its --timeout.
	TimeoutMS int64
	// MinWaitedMS is the least it waited: it queued behind a holder
	// (the deferred job's --wait 1s) or for memory (the --vram wait).
	MinWaitedMS int64
}

// theDay is what runDay's journal says, a line per job in this order of
// their ends, all of owner dayOwner on one lock; the SIGKILLed holder
// (holderOwner/holderSlug, killed with gpuexec -9 while the deferred job
// waits on it) has no line. The two sharers (share-a, share-b) held the
// card at once: their held times overlap.
var theDay = []dayJob{
	{Slug: "ok", Outcome: journal.OK, Started: true},
	{Slug: "failed", Outcome: journal.Failed, Status: 3, Started: true},
	{Slug: "timeout", Outcome: journal.Timeout, Status: 124, Started: true, TimeoutMS: 300},
	{Slug: "deferred", Outcome: journal.Deferred, Status: 75, MinWaitedMS: 1000},
	{Slug: "interrupted", Outcome: journal.Interrupted, Status: 130, Signal: "SIGINT", Started: true},
	{Slug: "share-a", Outcome: journal.OK, Started: true, Share: true, VRAMMiB: 4096},
	{Slug: "share-b", Outcome: journal.OK, Started: true, Share: true, VRAMMiB: 4096},
	{Slug: "vram-wait", Outcome: journal.OK, Started: true, VRAMMiB: 4096, MinWaitedMS: 500},
}

// runDay runs the scripted day through the real binary, on a lock of its
// own with the fake nvidia-smi (an RTX 4090), and returns the lock's path
// and its journal's (beside it): see theDay.
func runDay(t *testing.T) (lockPath, journalPath string) {
	t.Helper()
	_, lockPath = lockIn(t)
	journalPath = lockPath + journal.Suffix
	c := newCard(t, rtx4090(500))
	day := func(slug string, args ...string) []string {
		return append([]string{"--lock", lockPath, "--owner", dayOwner, "--slug", slug}, args...)
	}
	wantCode(t, gx(t, c.env(), day("ok", "--", "true")...), 0)
	wantCode(t, gx(t, c.env(), day("failed", "--", "sh", "-c", "exit 3")...), 3)
	wantCode(t, gx(t, c.env(), day("timeout", "--timeout", "300ms", "--", "sleep", "60")...), 124)

	// A holder whose gpuexec is SIGKILLed: its job keeps the lock until
	// it ends; no line for it. The deferred job gives up on it.
	h := startHolder(t, lockPath)
	wantCode(t, gx(t, c.env(), day("deferred", "--wait", "1s", "--", "true")...), 75)
	h.p.cmd.Process.Signal(syscall.SIGKILL)
	h.p.wait(t)
	h.release()
	testsupport.Await(t, long, "the killed holder's job to end", func() bool {
		return gx(t, nil, "status", "--check", "--lock", lockPath).code != 1 // free, or stale
	})

	// Interrupted while it runs: SIGINT to gpuexec, forwarded.
	ready := filepath.Join(t.TempDir(), "ready")
	p := startProc(t, gpuexecCmd(c.env(), day("interrupted", "--", "sh", "-c", `echo $$ > "$0"; exec sleep 60`, ready)...))
	testsupport.Await(t, long, "the job to run", func() bool { _, err := os.Stat(ready); return err == nil })
	p.cmd.Process.Signal(syscall.SIGINT)
	wantCode(t, p.wait(t), 130)

	// Two sharers at once.
	a := startShared(t, c, lockPath, "--owner", dayOwner, "--slug", "share-a", "--share", "--vram", "4G")
	b := startShared(t, c, lockPath, "--owner", dayOwner, "--slug", "share-b", "--share", "--vram", "4G")
	awaitStarted(t, a, b)
	wantCode(t, a.end(t), 0)
	wantCode(t, b.end(t), 0)

	// A job that waits for memory held by a process outside gpuexec.
	foreign := gputest.App{GPU: gputest.UUID0, PID: testsupport.DeadPID(t), Name: "/usr/bin/python3", Used: "21000"}
	c.set(rtx4090(21500, foreign))
	w := startProc(t, gpuexecCmd(c.env(), day("vram-wait", "--vram", "4G", "--report", "1s", "--wait", "1m", "--", "true")...))
	testsupport.Await(t, long, "the job to wait for memory", func() bool { return strings.Contains(w.stderr(), "waiting for 4.0 GiB") })
	c.set(rtx4090(500))
	wantCode(t, w.wait(t), 0)
	return lockPath, journalPath
}

// readJournal reads the journal at path (and its rotated files), failing
// the test if a line of it is not a valid record.
func readJournal(t *testing.T, path string) []journal.Record {
	t.Helper()
	rd, err := journal.Load([]string{path}, journal.Window{})
	if err != nil {
		t.Fatal(err)
	}
	if rd.Lines() != 0 || len(rd.Missing) != 0 {
		b, _ := os.ReadFile(path)
		t.Fatalf("journal %s: set aside %v, missing %v:\n%s", path, rd.SetAside, rd.Missing, b)
	}
	return rd.Records
}

// wantDayJob fails unless r says what j says.
func wantDayJob(t *testing.T, r journal.Record, j dayJob, lockPath string) {
	t.Helper()
	if r.Owner != dayOwner || r.Slug != j.Slug || r.Outcome != j.Outcome || r.Status != j.Status || r.Signal != j.Signal ||
		(r.Started != nil) != j.Started || r.Share != j.Share || r.VRAMMiB != j.VRAMMiB || r.TimeoutMS != j.TimeoutMS ||
		r.WaitedMS < j.MinWaitedMS || r.Lock != lockPath || r.PID <= 0 || r.Host == "" || r.User == "" || len(r.Argv) == 0 {
		t.Errorf("the line of %s:\n%+v\nwant %+v", j.Slug, r, j)
	}
}

func TestJournalOfADay(t *testing.T) {
	t.Parallel()
	lockPath, journalPath := runDay(t)
	recs := readJournal(t, journalPath)
	if len(recs) != len(theDay) {
		for _, r := range recs {
			t.Logf("%s/%s %s", r.Owner, r.Slug, r.Outcome)
		}
		t.Fatalf("%d lines, want %d (one per job of the day, none for the SIGKILLed holder)", len(recs), len(theDay))
	}
	bySlug := map[string]journal.Record{}
	for _, r := range recs {
		bySlug[r.Slug] = r
	}
	for _, j := range theDay {
		r, ok := bySlug[j.Slug]
		if !ok {
			t.Errorf("no line for %s", j.Slug)
			continue
		}
		t.Logf("%s: waited %d ms, held %d ms", j.Slug, r.WaitedMS, r.HeldMS)
		wantDayJob(t, r, j, lockPath)
	}
	if a, b := bySlug["share-a"], bySlug["share-b"]; a.Started == nil || b.Started == nil ||
		!a.Started.Before(b.Ended) || !b.Started.Before(a.Ended) {
		t.Errorf("the sharers did not hold the card at once: %v–%v and %v–%v", a.Started, a.Ended, b.Started, b.Ended)
	}
	if _, ok := bySlug[holderSlug]; ok {
		t.Error("a line for the SIGKILLed holder")
	}
}

// The outcomes the day has not, and where a refused job's line goes.
func TestJournalOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// run runs the job on lock (a folder of its own, not made yet)
		// and returns the journal to read ("" for the default).
		run     func(t *testing.T, lock string) string
		want    journal.Outcome
		status  int
		noLine  bool // the journal must not exist
		started bool
		check   func(t *testing.T, r journal.Record)
	}{
		{"refused, default journal: no line beside a lock it could not use", func(t *testing.T, lock string) string {
			os.MkdirAll(lock, 0o700) // the lock path is a folder
			wantCode(t, gx(t, nil, "--lock", lock, "--", "true"), 125)
			return ""
		}, "", 0, true, false, nil},
		{"refused, explicit journal: its line", func(t *testing.T, lock string) string {
			os.MkdirAll(lock, 0o700)
			j := filepath.Join(t.TempDir(), "elsewhere.journal")
			wantCode(t, gx(t, nil, "--lock", lock, "--journal", j, "--", "true"), 125)
			return j
		}, journal.Refused, 125, false, false, nil},
		{"a device's lock: the base lock's journal, the device named", func(t *testing.T, lock string) string {
			wantCode(t, gx(t, nil, "--lock", filepath.Join(filepath.Dir(lock), "gpu1.lock"), "--", "true"), 0)
			return ""
		}, journal.OK, 0, false, true, func(t *testing.T, r journal.Record) {
			if len(r.Devices) != 1 || r.Devices[0] != "1" {
				t.Errorf("devices %q, want [1]", r.Devices)
			}
		}},
		{"lost (a forced clear)", func(t *testing.T, lock string) string {
			p := startProc(t, gpuexecCmd(nil, "--lock", lock, "--", "sleep", "60"))
			testsupport.Await(t, long, "the job to start under the lock", func() bool {
				b, _ := os.ReadFile(lock)
				return strings.Contains(string(b), `"childStart"`)
			})
			wantCode(t, gx(t, nil, "--lock", lock, "clear", "--force"), 0)
			wantCode(t, p.wait(t), 125)
			return ""
		}, journal.Lost, 125, false, true, nil},
		{"interrupted while waiting", func(t *testing.T, lock string) string {
			startHolder(t, lock)
			p := startProc(t, gpuexecCmd(nil, "--lock", lock, "--wait", "1m", "--", "true"))
			testsupport.Await(t, long, "the job to queue", func() bool { return queueLen(t, lock) == 1 })
			p.cmd.Process.Signal(syscall.SIGTERM)
			wantCode(t, p.wait(t), 143)
			return ""
		}, journal.Interrupted, 143, false, false, func(t *testing.T, r journal.Record) {
			if r.Signal != "SIGTERM" {
				t.Errorf("signal %q", r.Signal)
			}
		}},
		{"overbudget", func(t *testing.T, lock string) string {
			c := newCard(t, rtx4090(500))
			j := startShared(t, c, lock, "--share", "--vram", "2G", "--vram-enforce", "--kill-after", "2s")
			awaitStarted(t, j)
			c.set(rtx4090(4500, gputest.App{GPU: gputest.UUID0, PIDFile: j.ready, Name: "/usr/bin/python3", Used: "4000"}))
			wantCode(t, j.wait(t), 123)
			return ""
		}, journal.OverBudget, 123, false, true, func(t *testing.T, r journal.Record) {
			if r.PeakMiB == nil || *r.PeakMiB != 4000 || !r.Share || r.VRAMMiB != 2048 {
				t.Errorf("peak %v share %v vram %d, want 4000 MiB of a 2048 MiB sharer", r.PeakMiB, r.Share, r.VRAMMiB)
			}
		}},
		{"idle warning", func(t *testing.T, lock string) string {
			c := newCard(t, rtx4090(500))
			ready := filepath.Join(t.TempDir(), "ready")
			p := startProc(t, gpuexecCmd(c.env(), "--lock", lock, "--owner", "idler", "--slug", "nothing", "--idle-warn", "2s",
				"--", "sh", "-c", `echo $$ > "$0"; exec sleep 60`, ready))
			testsupport.Await(t, long, "the idle warning", func() bool {
				return strings.Contains(p.stderr(), "job idler/nothing has held the GPU for")
			})
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.wait(t)
			if n := strings.Count(p.stderr(), "without using any video memory"); n != 1 {
				t.Errorf("%d idle warnings, want 1:\n%s", n, p.stderr())
			}
			return ""
		}, journal.Interrupted, 143, false, true, func(t *testing.T, r journal.Record) {
			if !r.IdleWarned || r.UnusedMS == nil || *r.UnusedMS < 2000 || r.PeakMiB == nil || *r.PeakMiB != 0 {
				t.Errorf("idle_warned %v unused %v peak %v, want warned, unused ≥ 2s, peak 0", r.IdleWarned, r.UnusedMS, r.PeakMiB)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, lock := lockIn(t)
			path := tt.run(t, lock)
			if path == "" {
				path = lock + journal.Suffix
			}
			if tt.noLine {
				if _, err := os.Lstat(path); err == nil {
					t.Fatalf("a journal was written at %s", path)
				}
				return
			}
			recs := readJournal(t, path)
			if len(recs) != 1 {
				t.Fatalf("%d lines, want 1", len(recs))
			}
			r := recs[0]
			if r.Outcome != tt.want || r.Status != tt.status || (r.Started != nil) != tt.started || r.Lock != lock {
				t.Errorf("line %+v, want %s status %d started %v lock %s", r, tt.want, tt.status, tt.started, lock)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

// 200 gpuexec processes ending at once, each its own lock, one journal:
// 200 whole, valid lines.
func TestConcurrentWritersLoseNoLine(t *testing.T) {
	t.Parallel()
	const writers = 200
	path := filepath.Join(t.TempDir(), "all.journal")
	base := t.TempDir()
	var wg sync.WaitGroup
	codes := make([]int, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lock := filepath.Join(base, strconv.Itoa(i), "gpu.lock")
			cmd := gpuexecCmd(nil, "--lock", lock, "--journal", path, "--slug", fmt.Sprintf("w%03d", i), "--", "true")
			out, _ := cmd.CombinedOutput()
			codes[i] = cmd.ProcessState.ExitCode()
			if strings.Contains(string(out), "journal") {
				t.Errorf("writer %d: %s", i, out)
			}
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 0 {
			t.Errorf("writer %d exited %d", i, c)
		}
	}
	recs := readJournal(t, path)
	slugs := map[string]bool{}
	for _, r := range recs {
		slugs[r.Slug] = true
	}
	if len(recs) != writers || len(slugs) != writers {
		t.Fatalf("%d lines of %d jobs, want %d", len(recs), len(slugs), writers)
	}
}

// A journal that cannot be written is one warning; the job's status is
// its own.
func TestJournalThatCannotBeWritten(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, path string)
	}{
		{"a folder missing", func(*testing.T, string) {}},
		{"a FIFO", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"a link", func(t *testing.T, path string) {
			if err := os.Symlink(filepath.Join(filepath.Dir(path), "target"), path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "j.journal")
			if tc.name == "a folder missing" {
				path = filepath.Join(dir, "none", "j.journal")
			}
			tc.plant(t, path)
			_, lock := lockIn(t)
			r := gx(t, nil, "--lock", lock, "--journal", path, "--", "sh", "-c", "exit 3")
			wantCode(t, r, 3)
			if n := strings.Count(r.stderr, "could not write the job's line in the journal"); n != 1 {
				t.Errorf("%d warnings, want 1:\n%s", n, r.stderr)
			}
			if _, err := os.Lstat(filepath.Join(dir, "target")); err == nil {
				t.Error("a link was followed")
			}
		})
	}
}

// In a group folder the journal is made as the lock's shared files are:
// 0660, in the folder's group.
func TestJournalInAGroupFolder(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a folder of another group")
	}
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	wantCode(t, gx(t, nil, "--lock", lock, "--", "true"), 0)
	guard, err := os.Lstat(lock + ".guard")
	if err != nil {
		t.Fatal(err)
	}
	jnl, err := os.Lstat(lock + journal.Suffix)
	if err != nil {
		t.Fatal(err)
	}
	gid := func(fi os.FileInfo) uint32 { return fi.Sys().(*syscall.Stat_t).Gid }
	if jnl.Mode().Perm() != 0o660 || gid(jnl) != groupGPU || gid(jnl) != gid(guard) || jnl.Mode().Perm() != guard.Mode().Perm() {
		t.Errorf("journal %v group %d, guard %v group %d: want both 0660 in group %d", jnl.Mode(), gid(jnl), guard.Mode(), gid(guard), groupGPU)
	}
	readJournal(t, lock+journal.Suffix)
}

// Members of a group folder's group, whatever their umask, append to one
// journal there; a user outside the group can open it no more than the
// lock's other files.
func TestMembersShareAGroupFoldersJournal(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run gpuexec as other users")
	}
	dir := sharedDir(t, os.ModeSetgid|0o775)
	lock := filepath.Join(dir, "gpu.lock")
	for _, m := range []struct {
		u    localUser
		mask string
	}{{memberA, "077"}, {memberB, "022"}, {memberC, "077"}} {
		r := startProc(t, gxUser(t, m.u, m.mask, nil, "--lock", lock, "--", "true")).wait(t)
		wantCode(t, r, 0)
		if strings.Contains(r.stderr, "journal") {
			t.Errorf("uid %d: %s", m.u.uid, r.stderr)
		}
	}
	if recs := readJournal(t, lock+journal.Suffix); len(recs) != 3 {
		t.Errorf("%d lines, want one per member", len(recs))
	}
	wantOutsiderLockedOut(t, outsiderOfA, lock, ".guard", journal.Suffix)
}
