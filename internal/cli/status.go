package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu"
	gproc "github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/lock"
)

// Exit statuses of status --check (125 when the lock cannot be read).
const (
	checkFree  = 0 // free (with --gpus: a device is free)
	checkHeld  = 1 // held by a live holder (with --gpus: every device is)
	checkStale = 2 // stale (with --gpus: none free, one stale)
)

// checkStatus is status --check's exit status for r: for one lock, free 0,
// held by a live holder 1, stale 2 (a free lock whose GPUs are held beside
// it, r.Beside, is held: its job cannot start); for devices, 0 when any is
// free (a job can start now), else 2 when any is stale (the next job clears
// it and starts), else 1.
func checkStatus(r *lock.Report) int {
	if len(r.Locks) == 1 && r.Locks[0].Device == "" {
		for _, st := range r.Beside {
			if st.State == lock.StateHeld {
				return checkHeld
			}
		}
	}
	free, stale := false, false
	for _, st := range r.Locks {
		switch st.State {
		case lock.StateFree:
			free = true
		case lock.StateStale:
			stale = true
		}
	}
	switch {
	case free:
		return checkFree
	case stale:
		return checkStale
	}
	return checkHeld
}

// besideNote ends a free lock's (or a cover's) status line when device
// locks beside it are held, which keep its job from starting: " (its GPUs
// are held beside it: gpu0.lock by channels/ep12 (pid 4242); add --gpus
// 0,1 to see them)"; "" when none is.
func besideNote(beside []*lock.Status) string {
	var held, names []string
	for _, st := range beside {
		names = append(names, st.Device)
		if st.State == lock.StateHeld {
			held = append(held, filepath.Base(st.Path)+" by "+st.Holder())
		}
	}
	if len(held) == 0 {
		return ""
	}
	return fmt.Sprintf(" (its GPUs are held beside it: %s; add --gpus %s to see them)",
		strings.Join(held, ", "), strings.Join(names, ","))
}

// describeReport is status's text for r: each lock's line (see lockText;
// "GPU 0: " before each device's), the note on device locks beside a free
// lock (r.Beside), the live waiters (see waiterLine; under a "queue:" line
// with devices), and last what was read (see readLine).
func describeReport(r *lock.Report) string {
	var b strings.Builder
	devices := len(r.Locks) != 1 || r.Locks[0].Device != ""
	for i, st := range r.Locks {
		if i > 0 {
			b.WriteByte('\n')
		}
		if devices {
			b.WriteString("GPU " + st.Device + ": ")
		}
		text := lockText(st)
		if !devices && (st.State == lock.StateFree || st.Info != nil && st.Info.Cover) {
			first, rest, more := strings.Cut(text, "\n")
			text = first + besideNote(r.Beside)
			if more {
				text += "\n" + rest
			}
		}
		b.WriteString(text)
	}
	var queue []string
	for _, w := range r.Queue {
		if w.Alive {
			queue = append(queue, waiterLine(w))
		}
	}
	if devices && len(queue) > 0 {
		b.WriteString("\nqueue:")
	}
	for _, l := range queue {
		b.WriteString("\n  " + l)
	}
	b.WriteString("\n" + readLine(r))
	return b.String()
}

// readLine names what status read, so that a lock other than the jobs'
// (another TMPDIR, a mistyped --lock) shows: "lock: /tmp/gpuexec/gpu.lock",
// "lock: etcd://10.0.0.11:2379/gpuexec/gpu-box" (an etcd URL holds no
// credentials: see etcdurl.Parse), or with devices "locks: gpu0.lock,
// gpu1.lock in /tmp/gpuexec".
func readLine(r *lock.Report) string {
	if len(r.Locks) == 1 && r.Locks[0].Device == "" {
		return "lock: " + r.Locks[0].Path
	}
	names := make([]string, len(r.Locks))
	for i, st := range r.Locks {
		names[i] = filepath.Base(st.Path)
	}
	return "locks: " + strings.Join(names, ", ") + " in " + filepath.Dir(r.Path)
}

// lockText is a lock's text in status and clear: its line (see lockLine),
// but for a holder on this host whose gpuexec is gone while something of
// its job keeps the lock held, which it names instead of calling the
// holder alive (a group not vouched for as its job, see doubtText, is
// named with no command that ends it), and followed by a line for a
// stopped holder or job (see stoppedLine).
func lockText(st *lock.Status) string {
	if st.State != lock.StateHeld || st.HolderProcess != lock.ProcGone {
		if l := stoppedLine(st); l != "" {
			return lockLine(st) + "\n  " + l
		}
		return lockLine(st)
	}
	var b strings.Builder
	b.WriteString(heading(st) + ": ")
	pid, g := st.Info.PID, st.JobGroup
	switch {
	case g > 0 && st.JobGroupDoubt != nil:
		// Not told as the job, nor how to end it: it may be anyone's.
		fmt.Fprintf(&b, "gpuexec %d is gone; %s: not told as its job (someone else's processes, or a job that took that uid: sudo); the lock stays held while that group runs", pid, doubtText(st))
	case g > 0 && st.JobProcess == lock.ProcRunning:
		fmt.Fprintf(&b, "gpuexec %d is gone; its job (process group %d) still runs and holds the lock until it ends (to end it: kill -- -%d)", pid, g, g)
	case g > 0 && st.JobProcess == lock.ProcStopped:
		fmt.Fprintf(&b, "gpuexec %d is gone; its job (process group %d) is stopped and holds the lock, the GPU unused, until it ends (to end it: kill -- -%d; kill -CONT -- -%d)", pid, g, g, g)
	case g > 0 && st.JobProcess == lock.ProcUnknown:
		fmt.Fprintf(&b, "gpuexec %d is gone; its job (process group %d) still holds the lock (to end it: kill -- -%d)", pid, g, g)
	default:
		fmt.Fprintf(&b, "gpuexec %d is gone, but a process of its job still runs and holds the lock until it ends", pid)
	}
	return b.String()
}

// stoppedLine says that a held lock's holder or job is stopped (Ctrl+Z,
// SIGSTOP), and what continues it: "stopped: gpuexec 8321 and its job
// (process group 8329) are stopped ..."; "" when neither is.
func stoppedLine(st *lock.Status) string {
	if st.State != lock.StateHeld || st.Info == nil {
		return ""
	}
	pid, g := st.Info.PID, st.JobGroup
	if st.JobGroupDoubt != nil {
		g = 0 // not told as its job (see lockText)
	}
	holder, job := st.HolderProcess == lock.ProcStopped, g > 0 && st.JobProcess == lock.ProcStopped
	const unused = "the lock stays held, the GPU unused, until"
	switch {
	case holder && job:
		return fmt.Sprintf("stopped: gpuexec %d and its job (process group %d) are stopped (Ctrl+Z or SIGSTOP): %s they are continued (fg in their shell, or kill -CONT -- -%d %d)", pid, g, unused, g, pid)
	case job:
		return fmt.Sprintf("stopped: its job (process group %d) is stopped (Ctrl+Z or SIGSTOP): %s it is continued (kill -CONT -- -%d)", g, unused, g)
	case holder && g > 0 && st.JobProcess == lock.ProcGone:
		return fmt.Sprintf("stopped: gpuexec %d is stopped (Ctrl+Z or SIGSTOP), its job gone: %s it is continued (fg in its shell, or kill -CONT %d)", pid, unused, pid)
	case holder && g > 0:
		return fmt.Sprintf("stopped: gpuexec %d is stopped (Ctrl+Z or SIGSTOP); its job (process group %d) runs on (kill -CONT %d continues gpuexec)", pid, g, pid)
	case holder:
		return fmt.Sprintf("stopped: gpuexec %d is stopped (Ctrl+Z or SIGSTOP; kill -CONT %d continues it)", pid, pid)
	}
	return ""
}

// waiterLine is a live waiter's line: "1. reels/tts (pid 77) waiting since
// 20:21:05", and for one that is stopped what that does.
func waiterLine(w lock.Waiter) string {
	var b strings.Builder
	// What a ticket says is anyone's word: shown escaped (see
	// lock.SafeName).
	fmt.Fprintf(&b, "%d. %s/%s (pid %d", w.Position, lock.SafeName(w.Owner), lock.SafeName(w.Slug), w.PID)
	if !gproc.SameHost(w.Host) {
		b.WriteString(" on " + lock.SafeName(w.Host))
	}
	b.WriteString(") waiting")
	if t, err := time.Parse(time.RFC3339Nano, w.Since); err == nil {
		b.WriteString(" since " + t.Local().Format("15:04:05"))
	}
	if w.Process == lock.ProcStopped {
		fmt.Fprintf(&b, ", stopped (Ctrl+Z or SIGSTOP): it takes nothing until it is continued (kill -CONT %d)", w.PID)
		if w.Position == 1 {
			b.WriteString("; a free GPU waits for it a moment, then the waiters behind it pass it")
		}
	}
	return b.String()
}

// unreadable is status's one line for a lock it could not read (status
// 125): a folder that does not exist or is not a folder is named as such,
// never taken for a free lock.
func unreadable(path string, err error) error {
	var pe *fs.PathError
	var fe *lock.FolderError
	switch {
	case errors.Is(err, lock.ErrNoFolder) && errors.As(err, &pe):
		return failed("cannot read the lock %s: its folder %s does not exist, so no job has used this lock "+
			"(do --lock, GPUEXEC_LOCK and TMPDIR say what the jobs' do?)", path, pe.Path)
	case errors.Is(err, syscall.ENOTDIR):
		if errors.As(err, &fe) {
			err = fe.Err // its folder's modes and the sharing hint are beside the point
		}
		return failed("cannot read the lock %s: %v", path, err)
	}
	return failed("%v", err)
}

// notCleared is clear's refusal of the lock st, held by a live holder
// (status 1): what holds it, and what ends that.
func notCleared(st *lock.Status) string {
	if st.HolderProcess == lock.ProcGone {
		return "not cleared: " + lockText(st) + "; --force would remove its record, not end that job"
	}
	msg := "not cleared: " + lockLine(st)
	if l := stoppedLine(st); l != "" {
		msg += "; " + l
	}
	return msg + "; use --force to remove a live holder's lock"
}

// afterForcedClear says, after clear --force removed the record of the
// holder st, what happens to its job: its gpuexec stops it, or, when that
// gpuexec is gone, nothing does.
func afterForcedClear(st *lock.Status) string {
	if st.HolderProcess == lock.ProcGone {
		return "its gpuexec is gone, so nothing stops its job: the lock stays held until that job ends, so that two jobs never share the GPU"
	}
	return "a gpuexec holder now stops its job; the lock stays held until that job is gone, so that two jobs never share the GPU"
}

// lockLine is the one human line for a lock: "free", or the holder, since
// when, the heartbeat's age, and alive or stale and why; for a lock held
// in shared mode, its sharers' lines after it (see writeSharers).
func lockLine(st *lock.Status) string {
	if st.State == lock.StateFree {
		return "free"
	}
	if st.Orphan != "" {
		return "held by " + st.Holder() + ", alive (" + st.Reason + ")"
	}
	var b strings.Builder
	b.WriteString(heading(st))
	switch {
	case st.State == lock.StateStale:
		b.WriteString("; " + st.Reason)
	case st.Reason != "":
		b.WriteString(", alive (" + st.Reason + ")")
	default:
		b.WriteString(", alive")
	}
	writeSharers(&b, st)
	return b.String()
}

// heading is the start of lockLine's line for a lock that is not free:
// who holds it, since when, and the heartbeat's age ("held by
// channels/ep12 (pid 4242) since 2026-10-12 20:18:03, heartbeat 5s ago";
// "stale: " before it for a stale lock).
func heading(st *lock.Status) string {
	var b strings.Builder
	if st.State == lock.StateStale {
		b.WriteString("stale: ")
	}
	if st.Info != nil && st.Info.Cover {
		b.WriteString("held for the GPU locks beside it, named by " + st.Holder())
	} else {
		b.WriteString("held by " + st.Holder())
	}
	if st.Info != nil {
		if t := st.Info.Acquired(); !t.IsZero() {
			b.WriteString(" since " + t.Local().Format(stampLayout))
		}
	}
	fmt.Fprintf(&b, ", heartbeat %s ago", st.HeartbeatAge.Round(time.Second))
	return b.String()
}

// stampLayout is how status writes a holder's and a sharer's times.
const stampLayout = "2006-01-02 15:04:05"

// writeSharers adds, for a lock held in shared mode, the budgets line and
// a line per sharer: "  shared: 20.0 GiB of budgets by 2 jobs" then
// "    channels/ep12 (pid 4242): budget 10.0 GiB, using 11.2 GiB: OVER BUDGET",
// and for a sharer whose processes are not attributed to it
// (lock.Sharer.Unattributed) "; its processes not attributed: " and why.
func writeSharers(b *strings.Builder, st *lock.Status) {
	if st.Info == nil || !st.Info.Share || st.State != lock.StateHeld {
		return
	}
	used, known := lock.Budget(st.Sharers)
	if !known {
		used = -1
	}
	fmt.Fprintf(b, "\n  shared: %s of budgets by %d job(s)", gpu.MiB(used), len(st.Sharers))
	for _, sh := range st.Sharers {
		if sh.Unopened {
			b.WriteString("\n    a sharer whose sidecar this user may not read: budget unknown")
			continue
		}
		fmt.Fprintf(b, "\n    %s: budget %s", sh.Name(), gpu.MiB(sh.MiB))
		if sh.UsedMiB > 0 {
			fmt.Fprintf(b, ", using %s", gpu.MiB(sh.UsedMiB))
		}
		if d := sh.DeadlineTime(); !d.IsZero() {
			fmt.Fprintf(b, ", stopped by %s", d.Local().Format(stampLayout))
		}
		if sh.Over {
			b.WriteString(": OVER BUDGET")
		}
		if sh.Unattributed != "" {
			b.WriteString("; its processes not attributed: " + sh.Unattributed)
		}
	}
}

// doubtText says why a held lock's job group is not vouched for as its
// job (lock.Status.JobGroupDoubt): "its record is uid 1001's but names
// process group 8329, which runs as uid 0", or, when a uid was not told
// (-1), "its record names process group 8329, which runs as another
// user"; "" when it is vouched for.
func doubtText(st *lock.Status) string {
	d := st.JobGroupDoubt
	switch {
	case d == nil:
		return ""
	case d.RecordUID < 0 || d.GroupUID < 0:
		return fmt.Sprintf("its record names process group %d, which runs as another user", st.JobGroup)
	}
	return fmt.Sprintf("its record is uid %d's but names process group %d, which runs as uid %d", d.RecordUID, st.JobGroup, d.GroupUID)
}
