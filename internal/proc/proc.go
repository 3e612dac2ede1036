// Package proc answers questions about processes that the lock, the
// supervisor and the tests all ask: is a process alive, when did it start,
// does a process group still have a live member, what is a process's parent
// and group, and what is this machine called. Each answer is read from the
// OS at the call (nothing is cached but the host name and the boot time);
// an answer that cannot be read says so (ok false) or errs on the side that
// keeps a lock held.
//
// Per-OS files: alive_unix.go and alive_windows.go (Alive), stat_linux.go
// (/proc: Stat, Start, Tree, Parent, GroupAlive), group_bsd.go (GroupAlive
// by kill), start_other.go (Start, Parent and ReadStat through gopsutil),
// uid_linux.go and uid_bsd.go (UID, GroupUID: who a process runs as; Unix
// only).
package proc

import (
	"os"
	"sync"
)

var (
	hostOnce sync.Once
	hostVal  string
)

// HostName is this machine's name as os.Hostname gives it, read once; ""
// when it cannot be read.
func HostName() string {
	hostOnce.Do(func() {
		if h, err := os.Hostname(); err == nil {
			hostVal = h
		}
	})
	return hostVal
}

// SameHost reports whether h names this machine: it is this machine's name,
// or empty (a record that names no host is taken to be from here).
func SameHost(h string) bool { return h == "" || h == HostName() }

// Stat is what the OS says of a process (Linux: /proc/PID/stat; see
// ReadStat).
type Stat struct {
	// State is the one-letter state: R running, S sleeping, T stopped,
	// Z zombie, ...
	State byte
	// PPID is the parent's pid, PGRP the process group, Session the
	// session (Linux only).
	PPID, PGRP, Session int
	// Comm is the command name (ReadStat only).
	Comm string
}
