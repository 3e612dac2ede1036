//go:build linux

package proc

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// GroupAlive reports whether process group pgid still has a live member
// that can be a job's (see GroupAliveSince); the group's start is not
// checked.
func GroupAlive(pgid int) bool { return GroupAliveSince(pgid, 0) }

// GroupAliveSince reports whether process group pgid, made by a job whose
// first process (the group's leader, pid pgid) started at since (ms since
// the epoch, as Start gives it; 0: not known), still has a live member.
//
// kill(-pgid, 0) also succeeds for zombies, which hold no GPU memory and
// may never be reaped (a parent that does not wait, an init that does not
// reap), so when it succeeds /proc is searched for a member that is not
// one. A group id is a pid, so another group may carry the number once the
// job's group is gone; these are never taken for the job's:
//   - a group whose members are all in a session that the group leads (a
//     daemon's setsid): a job's group is made with setpgid inside the
//     session of whoever started it, and its leader cannot start a session
//     (setsid fails for a group leader), so no member of it leads one by
//     the group's number;
//   - with since: a group whose leader, pid pgid, started at another time,
//     or any group when since is before this boot (nothing of that job can
//     have survived a reboot).
func GroupAliveSince(pgid int, since int64) bool {
	return groupRun(pgid, since, true) != Gone
}

// GroupRun is whether process group pgid, made by a job whose leader
// started at since (0: not known), can run: Running while a live member
// is not stopped, Stopped when every live member is, Gone when none is
// left (the members counted are GroupAliveSince's); RunUnknown when /proc
// cannot be read.
func GroupRun(pgid int, since int64) Run { return groupRun(pgid, since, false) }

// groupRun is GroupRun; with first, the first live member found answers
// (Running or Stopped: enough for GroupAliveSince).
func groupRun(pgid int, since int64, first bool) Run {
	if !groupSignalable(pgid) {
		return Gone
	}
	if since > 0 {
		if boot := bootTime(); boot > 0 && since < boot-startSlack {
			return Gone
		}
		if st, ok := Start(pgid); ok && !within(st, since) {
			return Gone // pid pgid is another process: the number was reused
		}
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return RunUnknown // cannot tell: keep the lock held
	}
	run := Gone
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		st, ok := readStat(e.Name())
		if !ok || st.PGRP != pgid || st.Session == pgid || st.State == 'Z' || st.State == 'X' {
			continue
		}
		if !stopped(st.State) {
			return Running
		}
		if run = Stopped; first {
			return run
		}
	}
	return run
}

// RunOf is whether pid can run: Gone when it is gone or a zombie,
// RunUnknown when it exists but its /proc entry cannot be read (another
// user's, under hidepid).
func RunOf(pid int) Run {
	if pid <= 0 {
		return Gone
	}
	st, ok := readStat(strconv.Itoa(pid))
	switch {
	case !ok && Alive(pid):
		return RunUnknown
	case !ok, st.State == 'Z', st.State == 'X':
		return Gone
	case stopped(st.State):
		return Stopped
	}
	return Running
}

// stopped reports whether a /proc state letter is a stopped process's: T
// (SIGSTOP, Ctrl+Z) or t (stopped by a debugger).
func stopped(state byte) bool { return state == 'T' || state == 't' }

// startSlack is how far two readings of one process's start time may
// differ (Start's boot time has a resolution of a second).
const startSlack = 1000

func within(a, b int64) bool { return a-b <= startSlack && b-a <= startSlack }

// ReadStat reads pid's /proc/PID/stat; ok false when the process is gone
// or the file cannot be parsed.
func ReadStat(pid int) (Stat, bool) {
	b, err := readProc("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	st, ok := parseStat(b)
	if ok {
		st.Comm = string(b[bytes.IndexByte(b, '(')+1 : bytes.LastIndexByte(b, ')')])
	}
	return st, ok
}

func readStat(pid string) (Stat, bool) {
	b, err := readProc("/proc/" + pid + "/stat")
	if err != nil {
		return Stat{}, false
	}
	return parseStat(b)
}

// parseStat parses the content of /proc/PID/stat, but for the command
// name.
func parseStat(b []byte) (Stat, bool) {
	f, ok := statFields(b)
	if !ok {
		return Stat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	sid, err3 := strconv.Atoi(string(f[3]))
	if err1 != nil || err2 != nil || err3 != nil {
		return Stat{}, false
	}
	return Stat{State: f[0][0], PPID: ppid, PGRP: pgrp, Session: sid}, true
}

// Tree reads every process's parent and process group from /proc: the
// children of each pid, and the group of each.
func Tree() (children map[int][]int, pgrp map[int]int) {
	children, pgrp = map[int][]int{}, map[int]int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return children, pgrp
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := readStat(e.Name())
		if !ok {
			continue
		}
		children[st.PPID] = append(children[st.PPID], pid)
		pgrp[pid] = st.PGRP
	}
	return children, pgrp
}

// Parent is pid's parent; ok false when pid is gone.
func Parent(pid int) (int, bool) {
	st, ok := ReadStat(pid)
	return st.PPID, ok
}

// statFields returns the fields of /proc/PID/stat content after the
// command name ("pid (comm) state ppid pgrp ...", comm may hold spaces and
// parentheses): f[0] is field 3 (state), f[N-3] is field N.
func statFields(b []byte) ([][]byte, bool) {
	i := bytes.LastIndexByte(b, ')')
	if open := bytes.IndexByte(b, '('); open < 0 || open > i {
		return nil, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return nil, false
	}
	return f, true
}

// userHZ is the unit of /proc's tick counts. It is fixed at 100 on every
// architecture Linux runs on today (what sysconf(_SC_CLK_TCK) returns, and
// what gopsutil's sysconf package hard-codes for Linux).
const userHZ = 100

var (
	bootOnce sync.Once
	bootMs   int64
)

// bootTime is the boot time in ms since the epoch, from /proc/stat's btime.
func bootTime() int64 {
	bootOnce.Do(func() {
		b, err := readProc("/proc/stat")
		if err != nil {
			return
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if rest, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
				s, err := strconv.ParseInt(string(bytes.TrimSpace(rest)), 10, 64)
				if err == nil {
					bootMs = s * 1000
				}
				return
			}
		}
	})
	return bootMs
}

// Start returns pid's start time in milliseconds since the Unix
// epoch: boot time plus /proc/PID/stat's starttime (field 22). It is read
// here rather than through gopsutil, whose process package costs every run
// of gpuexec its packages' initialisation; other systems use gopsutil (proc_start_other.go).
func Start(pid int) (ms int64, ok bool) {
	b, err := readProc("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	f, ok := statFields(b)
	boot := bootTime()
	if !ok || boot == 0 {
		return 0, false
	}
	ticks, err := strconv.ParseInt(string(f[19]), 10, 64)
	if err != nil {
		return 0, false
	}
	return boot + ticks*1000/userHZ, true
}

// readProc reads the whole of a file of /proc with plain system calls:
// os.ReadFile would also try the runtime's poller for it (fcntl calls and
// an epoll_ctl), more than the read itself costs, at every judge of a lock
// and every start of gpuexec.
func readProc(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 2048)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return b, nil
		}
		b = b[:len(b)+n]
	}
}
