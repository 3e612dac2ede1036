//go:build !linux

package lock

import "github.com/shirou/gopsutil/v3/process"

// processStart returns pid's start time in milliseconds since the Unix
// epoch, as gopsutil reads it from the kernel's process table; ok=false
// when it cannot be read. (Linux reads /proc itself: see proc_linux.go.)
func processStart(pid int) (ms int64, ok bool) {
	p := &process.Process{Pid: int32(pid)}
	ms, err := p.CreateTime()
	if err != nil || ms <= 0 {
		return 0, false
	}
	return ms, true
}
