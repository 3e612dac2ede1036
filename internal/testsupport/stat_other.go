//go:build !linux

package testsupport

// ProcStat reads /proc/PID/stat: the process's state, parent, process
// group and command name. ok is false when the process is gone (or the
// file does not parse), and always off Linux.
func ProcStat(int) (Stat, bool) { return Stat{}, false }
