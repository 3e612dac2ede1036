//go:build windows

package lock

import (
	"errors"

	"golang.org/x/sys/windows"
)

// stillActive is GetExitCodeProcess's STILL_ACTIVE (259).
const stillActive = 259

// processAlive reports whether pid names a running process: it can be opened
// (access denied counts as alive) and has no exit code yet.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return errors.Is(err, windows.ERROR_ACCESS_DENIED)
	}
	defer windows.CloseHandle(h)
	var code uint32
	if err := windows.GetExitCodeProcess(h, &code); err != nil {
		return true
	}
	return code == stillActive
}

// groupAlive is always false on Windows: the job runs in a Job Object that
// is killed with gpuexec, so no part of it outlives the holder.
func groupAlive(int) bool { return false }
