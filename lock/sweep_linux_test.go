//go:build linux

package lock

import (
	"fmt"
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

// A file beside a lock whose record is gone, whose kernel lock nobody
// holds and whose noted job's group still runs keeps the lock held for as
// long as that job runs when the note is its owner's word (the group is
// its owner's, or the file root's); otherwise only while the file is fresh
// (stale after its last change), and clear --force removes it. A shared
// record's liveness file, which every sharer may write, is never read for
// a group.
func TestLeftoverNamingAJobKeepsTheLockOnlyAsItsOwnersWord(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make files and processes of another user (CI runs as root)")
	}
	const member = 4243
	as := func(uid int) (pgid int, start int64) {
		t.Helper()
		cmd := exec.Command("sleep", "600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if uid != 0 {
			cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		start, ok := proc.Start(cmd.Process.Pid)
		if !ok {
			t.Fatal("no start time")
		}
		return cmd.Process.Pid, start
	}
	rootJob, rootStart := as(0)
	memberJob, memberStart := as(member)
	const stale = time.Minute
	liveNote := func(pgid int, start int64) string { return fmt.Sprintf("%d %d", pgid, start) }
	sidecar := func(pgid int, start int64) string {
		return fmt.Sprintf(`{"pid":999999,"host":%q,"childPgid":%d,"childStart":%d,"vramMiB":1}`, proc.HostName(), pgid, start)
	}
	type content func(int, int64) string
	for _, tc := range []struct {
		name    string
		suffix  string
		content content
		owner   int
		perm    os.FileMode
		job     int
		start   int64
		old     bool
		want    string // "" free, "owner" held as the owner's word, "refused" held while fresh
	}{
		{"a holder's note of its own job, old", liveSuffix, liveNote, member, 0o640, memberJob, memberStart, true, "owner"},
		{"a note of another user's job, fresh", liveSuffix, liveNote, member, 0o640, rootJob, rootStart, false, "refused"},
		{"a note of another user's job, old", liveSuffix, liveNote, member, 0o640, rootJob, rootStart, true, ""},
		{"root's note of a member's job, old", liveSuffix, liveNote, 0, 0o640, memberJob, memberStart, true, "owner"},
		{"a shared record's liveness file, fresh", liveSuffix, liveNote, member, 0o660, memberJob, memberStart, false, ""},
		{"a gone sharer's sidecar, old", shareSuffix, sidecar, member, 0o640, memberJob, memberStart, true, "owner"},
		{"a sidecar naming another user's job, fresh", shareSuffix, sidecar, member, 0o640, rootJob, rootStart, false, "refused"},
		{"a sidecar naming another user's job, old", shareSuffix, sidecar, member, 0o640, rootJob, rootStart, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			lockPath := filepath.Join(dir, "gpu.lock")
			p := lockPath + tc.suffix + "0123456789abcdef"
			if err := os.WriteFile(p, []byte(tc.content(tc.job, tc.start)), tc.perm); err != nil {
				t.Fatal(err)
			}
			os.Chmod(p, tc.perm)
			if err := os.Chown(p, tc.owner, tc.owner); err != nil {
				t.Fatal(err)
			}
			if tc.old {
				then := time.Now().Add(-2 * stale)
				os.Chtimes(p, then, then)
			}
			busy := findOrphan(lockPath, stale)
			switch {
			case tc.want == "" && busy != nil:
				t.Fatalf("held: %s", busy.Reason)
			case tc.want == "":
				return
			case busy == nil:
				t.Fatal("free")
			case len(busy.keptBy) != 1 || busy.keptBy[0] != tc.job:
				t.Errorf("kept by %v, want [%d]", busy.keptBy, tc.job)
			case strings.Contains(busy.Reason, "is locked"):
				t.Errorf("reason says a file nobody holds is locked: %s", busy.Reason)
			case (busy.orphanRefused != "") != (tc.want == "refused"):
				t.Errorf("refused %q, want %s", busy.orphanRefused, tc.want)
			}
			busy, _ = clearLeftovers(lockPath, stale)
			_, err := os.Lstat(p)
			if tc.want == "refused" && (busy != nil || err == nil) {
				t.Errorf("clear --force left it: %v, file there %v", busy, err == nil)
			}
			if tc.want == "owner" && (busy == nil || err != nil) {
				t.Errorf("clear --force took a job's leftover: %v, file there %v", busy, err == nil)
			}
		})
	}
}

// A holder touches its own liveness file, and a sharer its sidecar, at each
// heartbeat: their mtime says when it was last alive, which bounds how long
// a note in them that is not their owner's word keeps the lock held.
func TestHeartbeatTouchesTheHoldersOwnFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		mib  int64
		glob string
	}{
		{"a holder's liveness file", 0, liveSuffix},
		{"a sharer's sidecar", 10, shareSuffix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := sharerOptions(t, testOptions(t).Path, tc.mib)
			if tc.mib == 0 {
				o.ShareMiB, o.AdmitShare = 0, nil
			}
			o.Heartbeat, o.Stale = 20*time.Millisecond, time.Minute
			h, err := TryAcquire(o)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release()
			files, _ := filepath.Glob(o.Path + tc.glob + "*")
			if len(files) != 1 {
				t.Fatalf("files: %v", files)
			}
			then := time.Now().Add(-time.Hour)
			if err := os.Chtimes(files[0], then, then); err != nil {
				t.Fatal(err)
			}
			testsupport.Await(t, 10*time.Second, "a heartbeat to touch "+filepath.Base(files[0]), func() bool {
				fi, err := os.Stat(files[0])
				return err == nil && time.Since(fi.ModTime()) < time.Minute
			})
		})
	}
}
