//go:build windows

package proc

import (
	"errors"

	"golang.org/x/sys/windows"
)

// stillActive is GetExitCodeProcess's STILL_ACTIVE (259).
const stillActive = 259

// Alive reports whether pid names a running process. A pid that
// OpenProcess does not know (ERROR_INVALID_PARAMETER) is gone; one it may
// not open (access denied: another user's, a protected process) is alive,
// as EPERM is on Unix. An opened process is alive until it has an exit
// code; a process object that outlives its process (someone still holds a
// handle to it) is not alive. A process that exited with code 259 itself is
// told apart by waiting on it, where the handle allows that.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION|windows.SYNCHRONIZE, false, uint32(pid))
	sync := err == nil
	if errors.Is(err, windows.ERROR_ACCESS_DENIED) {
		h, err = windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	}
	switch {
	case errors.Is(err, windows.ERROR_INVALID_PARAMETER):
		return false
	case err != nil:
		return true // access denied, or cannot tell: keep the lock held
	}
	defer windows.CloseHandle(h)
	var code uint32
	if err := windows.GetExitCodeProcess(h, &code); err != nil {
		return true
	}
	if code != stillActive {
		return false
	}
	if sync {
		ev, err := windows.WaitForSingleObject(h, 0)
		return err != nil || ev != windows.WAIT_OBJECT_0
	}
	return true
}

// GroupAlive is always false on Windows: the job runs in a Job Object that
// is killed with gpuexec, so no part of it outlives the holder.
func GroupAlive(int) bool { return false }

// GroupSignalable is GroupAlive: always false on Windows.
func GroupSignalable(int) bool { return false }

// GroupAliveSince is GroupAlive: always false on Windows.
func GroupAliveSince(int, int64) bool { return false }
