//go:build linux

package lock

import (
	"bytes"
	"os"
	"strconv"
	"sync"
)

// groupAlive reports whether process group pgid still has a live member.
// kill(-pgid, 0) also succeeds for zombies, which hold no GPU memory and
// may never be reaped (a parent that does not wait, an init that does not
// reap), so when it succeeds /proc is searched for a member that is not one.
func groupAlive(pgid int) bool {
	if !groupSignalable(pgid) {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true // cannot tell: keep the lock held
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		state, pgrp, ok := procStat(e.Name())
		if ok && pgrp == pgid && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// procStat reads a process's state and process group from /proc/PID/stat.
func procStat(pid string) (state byte, pgrp int, ok bool) {
	f, ok := procStatFields(pid)
	if !ok {
		return 0, 0, false
	}
	pgrp, err := strconv.Atoi(string(f[2]))
	return f[0][0], pgrp, err == nil
}

// procStatFields returns the fields of /proc/PID/stat after the command
// name ("pid (comm) state ppid pgrp ...", comm may hold spaces and
// parentheses): f[0] is field 3 (state), f[N-3] is field N.
func procStatFields(pid string) ([][]byte, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
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
		b, err := os.ReadFile("/proc/stat")
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

// processStart returns pid's start time in milliseconds since the Unix
// epoch: boot time plus /proc/PID/stat's starttime (field 22). It is read
// here rather than through gopsutil, whose process package costs every run
// of gpuexec its packages' initialisation (measured in README's performance
// notes); other systems use gopsutil (proc_start_other.go).
func processStart(pid int) (ms int64, ok bool) {
	f, ok := procStatFields(strconv.Itoa(pid))
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
