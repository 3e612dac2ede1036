// Package proc answers questions about processes that the lock, the
// supervisor and the tests all ask: is a process alive, when did it start,
// does a process group still have a live member, what is a process's parent
// and group, and what is this machine called. Each answer is read from the
// OS at the call (nothing is cached but the host name and the boot time);
// an answer that cannot be read says so (ok false) or errs on the side that
// keeps a lock held.
//
// Per-OS files: alive_unix.go and alive_windows.go (Alive), stat_linux.go
// (/proc: Stat, Start, Tree, Parent, GroupAlive, RunOf, GroupRun),
// group_bsd.go (GroupAlive by kill), start_other.go (Start, Parent and
// ReadStat through gopsutil), run_other.go (RunOf and GroupRun where the
// state cannot be read),
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

// Run is whether a process, or a process group, can run now, as the OS
// says at the call.
type Run int

const (
	// RunUnknown: it exists, but the OS does not say whether it is
	// stopped (off Linux), or the process table cannot be read.
	RunUnknown Run = iota
	// Running: it may run (running, sleeping, waiting for a disk): for a
	// group, at least one of its live members is not stopped.
	Running
	// Stopped: it is stopped (SIGSTOP, Ctrl+Z, reading the terminal in
	// the background) or held by a debugger: for a group, every live
	// member is. It does nothing until it is continued.
	Stopped
	// Gone: no such process, or only a zombie of it; for a group, no live
	// member that can be the job's (see GroupAliveSince).
	Gone
)
