//go:build !linux

package proc

import "github.com/shirou/gopsutil/v3/process"

// Start returns pid's start time in milliseconds since the Unix
// epoch, as gopsutil reads it from the kernel's process table; ok=false
// when it cannot be read. (Linux reads /proc itself: see stat_linux.go.)
func Start(pid int) (ms int64, ok bool) {
	p := &process.Process{Pid: int32(pid)}
	ms, err := p.CreateTime()
	if err != nil || ms <= 0 {
		return 0, false
	}
	return ms, true
}

// Parent is pid's parent, as the OS reports it (sysctl, Toolhelp).
func Parent(pid int) (int, bool) {
	p, err := process.NewProcess(int32(pid))
	if err != nil {
		return 0, false
	}
	ppid, err := p.Ppid()
	return int(ppid), err == nil
}

// ReadStat reads pid's parent and name from the OS's process table; the
// state and process group are not read here (0). ok false when the process
// is gone.
func ReadStat(pid int) (Stat, bool) {
	p, err := process.NewProcess(int32(pid))
	if err != nil {
		return Stat{}, false
	}
	ppid, err := p.Ppid()
	if err != nil {
		return Stat{}, false
	}
	name, _ := p.Name()
	return Stat{PPID: int(ppid), Comm: name}, true
}
