//go:build linux

package lock

import (
	"bytes"
	"os"
	"strconv"
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

// procStat reads a process's state and process group from /proc/PID/stat
// ("pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses).
func procStat(pid string) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	pgrp, err = strconv.Atoi(string(f[2]))
	return f[0][0], pgrp, err == nil
}
