//go:build windows

package logfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/windows"
)

// openSidecar opens (creating) the sidecar whose lock the writers take.
// Who else may open it is the folder's ACL's business, which it inherits.
func openSidecar(path string) (*os.File, error) {
	f, _, err := openFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	return f, err
}

// identity is what tells the file f from any other (its volume and file
// index), and how many names it has.
func identity(f *os.File, _ fs.FileInfo) (string, uint64, error) {
	var d windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(windows.Handle(f.Fd()), &d); err != nil {
		return "", 0, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return fmt.Sprintf("%x:%x:%x", d.VolumeSerialNumber, d.FileIndexHigh, d.FileIndexLow), uint64(d.NumberOfLinks), nil
}

// lockPause is how often lockWithin tries again.
const lockPause = 5 * time.Millisecond

// lockWithin takes an exclusive LockFileEx lock on f's first byte, trying
// every lockPause for at most d (ErrBusy, and f closed): the handles are synchronous, and
// a blocking LockFileEx on one cannot be given up. (The lock's files lock
// a byte far past their content instead; the log's sidecar keeps the first
// byte, which every gpuexec writing the log locks.) The
// lock (mandatory on Windows) keeps other processes from the sidecar's
// first byte while a writer holds it; they read it only when they hold it.
func lockWithin(f *os.File, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &windows.Overlapped{})
		if !errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
			return err
		}
		if !time.Now().Before(deadline) {
			f.Close() // as on Unix, f is no longer the caller's
			return ErrBusy
		}
		time.Sleep(lockPause)
	}
}

func unlockFile(f *os.File) error {
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, &windows.Overlapped{})
}
