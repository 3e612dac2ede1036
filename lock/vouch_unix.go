//go:build unix

package lock

import (
	"fmt"
	"os"
	"syscall"

	"github.com/gpuexec/gpuexec/internal/proc"
)

// vouch says why the processes that the live sidecar open as f, read as
// s, names are not taken for its sharer's own (Sharer.Unattributed), ""
// when they are.
//
// Anyone who may create files in the lock's folder (a member of its group)
// can write a sidecar and hold its kernel lock (flock FILE sleep), and
// name any pid and process group in it: the video memory of the processes
// it names would move from "in use by others" into a small budget, and a
// sharer would be let in that does not fit. What no such member can fake
// is who owns the file: a sidecar is gpuexec's when the processes it
// names run as its file's owner, the user whose gpuexec made it (root's
// files only root makes, and root's are taken as they are). A refused
// sidecar still counts, its budget and the lock it keeps held, since a
// real sharer's may be refused too (its job took uid 0 with sudo; someone
// made a second name for its file): only the attribution goes, and its
// job's memory then counts twice, in its budget and as others'; once its
// kernel lock is free (Gone), it keeps the lock held only while its file
// is fresh (see readSharer). So a sidecar's processes are refused when
//   - its file has more than one name (a hard link to someone else's
//     file, where fs.protected_hardlinks allows one), or others than its
//     owner may write it;
//   - its gpuexec still holds it (not Gone) and its pid runs as another
//     user (the real uid; for a Gone sharer the pid is a dead gpuexec's
//     and may be anyone's by now);
//   - the process group it names runs as another user (proc.GroupUID: its
//     leader's, else its members');
//   - its gpuexec runs (its pid, started at its pidStart) and the group's
//     leader (pid childPgid, started at childStart) runs but is not that
//     gpuexec's child: the group is not its job (gpuexec starts the job's
//     first process, which leads the group).
//
// What cannot be read (a process gone meanwhile) refuses nothing: a
// refusal needs evidence. What a member can still do is name processes of
// its own, as it could by running a sharer with a small budget.
func vouch(f *os.File, s Sharer) string {
	owner, why := writer(f)
	if why != "" || owner <= 0 {
		return why // root's (0) taken as they are; -1: not told
	}
	if !sameHost(s.Host) {
		return "" // names no process here (see Sharer.Host)
	}
	if s.PID > 0 && !s.Gone {
		if uid, ok := proc.UID(s.PID); ok && uid != owner {
			return fmt.Sprintf("its file is uid %d's but names pid %d, which runs as uid %d", owner, s.PID, uid)
		}
	}
	if s.ChildPGID <= 0 {
		return ""
	}
	if why := groupOf(owner, s.ChildPGID); why != "" {
		return why
	}
	if s.Gone || s.PID <= 0 || s.PIDStart <= 0 || s.ChildStart <= 0 {
		return ""
	}
	if started, ok := proc.Start(s.PID); !ok || !withinTolerance(started, s.PIDStart) {
		return "" // its gpuexec is gone: its job outlives it
	}
	if started, ok := proc.Start(s.ChildPGID); !ok || !withinTolerance(started, s.ChildStart) {
		return ""
	}
	if parent, ok := proc.Parent(s.ChildPGID); ok && parent != s.PID {
		return fmt.Sprintf("it names process group %d, which its pid %d did not start (its leader's parent is pid %d)", s.ChildPGID, s.PID, parent)
	}
	return ""
}

// writer is the owner of the file open as f, whose content may be taken
// for its owner's word (0: root's, taken as it is), or why not: a file
// with more than one name (a hard link to someone else's file, where
// fs.protected_hardlinks allows one: gpuexec makes each of its files anew,
// with one name), or one that others than its owner may write (see
// othersMayWrite); or a file that cannot be told ("" and -1).
func writer(f *os.File) (uid int, why string) {
	fi, err := f.Stat()
	if err != nil {
		return -1, ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		return -1, ""
	case st.Nlink != 1:
		return -1, fmt.Sprintf("its file has %d links", st.Nlink)
	case othersMayWrite(fi):
		return -1, fmt.Sprintf("its file may be written by others than its owner (%s)", fi.Mode().Perm())
	}
	return int(st.Uid), ""
}

// othersMayWrite reports whether others than its owner may write the file
// fi describes (its group, or everyone): what it says is nobody's word.
// gpuexec makes liveness files and sidecars writable by their owner alone,
// except a shared record's liveness file (osfile.Joined), which every
// sharer of the record joins for writing.
func othersMayWrite(fi os.FileInfo) bool { return fi.Mode().Perm()&0o022 != 0 }

// groupOf says why the process group pgid is not owner's (it runs as
// another user: proc.GroupUID, its leader's real uid, else its members'),
// "" when it is, or when that cannot be read (a refusal needs evidence).
func groupOf(owner, pgid int) string {
	if uid, ok := proc.GroupUID(pgid); ok && uid != owner {
		return fmt.Sprintf("its file is uid %d's but names process group %d, which runs as uid %d", owner, pgid, uid)
	}
	return ""
}

// ownersWord says why the process group pgid that the file open as f
// notes is not taken for its owner's job: the file is not its owner's word
// (see writer), or the group runs as another user than the file's owner
// (root's files are taken as they are). "" when it is.
func ownersWord(f *os.File, pgid int) string {
	owner, why := writer(f)
	if why != "" || owner <= 0 || pgid <= 0 {
		return why
	}
	return groupOf(owner, pgid)
}

// fileOwner is the uid that owns the file fi describes.
func fileOwner(fi os.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// groupUID is the real uid process group pgid runs as (see
// proc.GroupUID).
func (osProber) groupUID(pgid int) (int, bool) { return proc.GroupUID(pgid) }
