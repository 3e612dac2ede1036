//go:build linux

package proc

import (
	"bytes"
	"os"
	"strconv"
)

// UID is the real uid pid runs as (/proc/PID/status); ok false when the
// process is gone or the file cannot be parsed.
func UID(pid int) (uid int, ok bool) {
	if pid <= 0 {
		return 0, false
	}
	return readUID(strconv.Itoa(pid))
}

func readUID(pid string) (int, bool) {
	b, err := readProc("/proc/" + pid + "/status")
	if err != nil {
		return 0, false
	}
	return parseUID(b)
}

// parseUID reads the real uid from the content of /proc/PID/status: the
// first figure of its "Uid:" line (real, effective, saved, filesystem).
func parseUID(b []byte) (int, bool) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
			f := bytes.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			uid, err := strconv.Atoi(string(f[0]))
			if err != nil || uid < 0 {
				return 0, false
			}
			return uid, true
		}
	}
	return 0, false
}

// GroupUID is the real uid of process group pgid: its leader's (pid pgid)
// while it runs, else that of a live member (zombies aside), all of which
// must have the same; ok false when no live member can be read, or when
// two members' differ (a member that changed its real uid with privilege:
// su, sudo) and the leader is gone.
//
// The members of a group share its leader's session, and a process joins a
// group only by being forked into it or by setpgid from itself or its
// parent, within that session: so they run as the user who made the group
// but for a process that changed its real uid with privilege.
func GroupUID(pgid int) (uid int, ok bool) {
	if pgid <= 1 {
		return 0, false
	}
	if st, found := ReadStat(pgid); found && st.PGRP == pgid && st.State != 'Z' && st.State != 'X' {
		if uid, ok := UID(pgid); ok {
			return uid, true
		}
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	found := false
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		st, ok := readStat(e.Name())
		if !ok || st.PGRP != pgid || st.State == 'Z' || st.State == 'X' {
			continue
		}
		u, ok := readUID(e.Name())
		switch {
		case !ok:
		case !found:
			uid, found = u, true
		case u != uid:
			return 0, false
		}
	}
	return uid, found
}
