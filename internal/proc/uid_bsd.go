//go:build unix && !linux

package proc

import "github.com/shirou/gopsutil/v3/process"

// UID is the real uid pid runs as, as the OS's process table gives it; ok
// false when the process is gone or it cannot be read.
func UID(pid int) (uid int, ok bool) {
	if pid <= 0 {
		return 0, false
	}
	p, err := process.NewProcess(int32(pid))
	if err != nil {
		return 0, false
	}
	ids, err := p.Uids()
	if err != nil || len(ids) == 0 || ids[0] < 0 {
		return 0, false
	}
	return int(ids[0]), true
}

// GroupUID is the real uid of process group pgid's leader (pid pgid) while
// it runs; ok false once it is gone (the group's other members are not
// searched here; see the Linux version).
func GroupUID(pgid int) (uid int, ok bool) {
	if pgid <= 1 {
		return 0, false
	}
	return UID(pgid)
}
