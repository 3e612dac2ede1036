//go:build !linux

package supervisor

import "github.com/shirou/gopsutil/v3/process"

// parentOf is pid's parent, as the OS reports it (sysctl, Toolhelp).
func parentOf(pid int) (int, bool) {
	p, err := process.NewProcess(int32(pid))
	if err != nil {
		return 0, false
	}
	ppid, err := p.Ppid()
	return int(ppid), err == nil
}
