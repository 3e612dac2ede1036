package testsupport

import (
	"os"
	"syscall"

	"github.com/gpuexec/gpuexec/internal/proc"
)

// ProcStat reads /proc/PID/stat: the process's state, parent, process
// group and command name. ok is false when the process is gone (or the
// file does not parse), and always off Linux.
func ProcStat(pid int) (Stat, bool) { return proc.ReadStat(pid) }

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
