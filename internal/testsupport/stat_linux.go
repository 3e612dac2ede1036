package testsupport

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ProcStat reads /proc/PID/stat: the process's state, parent, process
// group and command name. ok is false when the process is gone (or the
// file does not parse), and always off Linux.
func ProcStat(pid int) (st Stat, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, false
	}
	return parseStat(b)
}

// parseStat parses the content of a /proc/PID/stat file.
func parseStat(b []byte) (st Stat, ok bool) {
	// "pid (comm) S ppid pgrp ...": comm may hold anything, parentheses
	// and blanks included; the other fields follow the last ')'.
	i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if i < 0 || j < i {
		return Stat{}, false
	}
	f := strings.Fields(string(b[j+1:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return Stat{}, false
	}
	st = Stat{State: f[0][0], Comm: string(b[i+1 : j])}
	var err1, err2 error
	st.PPID, err1 = strconv.Atoi(f[1])
	st.PGRP, err2 = strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return Stat{}, false
	}
	return st, true
}

// ended reports whether pid is a zombie (or dead), or gone; it reaps a
// zombie whose parent is this process.
func ended(pid int) bool {
	st, ok := ProcStat(pid)
	if !ok {
		return true
	}
	if st.State == 'Z' && st.PPID == os.Getpid() {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	}
	return st.State == 'Z' || st.State == 'X'
}
