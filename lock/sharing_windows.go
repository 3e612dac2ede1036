//go:build windows

package lock

import (
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/windows"
)

// Windows refuses to rename, delete or open a file that another process has
// open without the matching share mode, and refuses to create a file at a
// name whose previous file was deleted while still open ("delete pending",
// reported as access denied) until the last handle closes. Readers of a lock
// file hold it open for microseconds (gpuexec opens it sharing everything,
// as Node does; PowerShell's Get-Content, editors, backup and antivirus
// scanners may not), so those failures are transient: the protocol's renames,
// removals, creations and heartbeats retry them for a bounded time.
const (
	sharingRetryFor   = 2 * time.Second
	sharingFirstRetry = time.Millisecond
	sharingMaxRetry   = 50 * time.Millisecond
)

// retrySharing runs op, and runs it again while it fails with a sharing
// violation, a lock violation or access denied, for at most
// sharingRetryFor. The last error is returned.
func retrySharing(op func() error) error {
	deadline := time.Now().Add(sharingRetryFor)
	delay := sharingFirstRetry
	for {
		err := op()
		if err == nil || !transientSharing(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
		delay = min(2*delay, sharingMaxRetry)
	}
}

// transientSharing reports whether err is one that another process's open
// handle causes.
func transientSharing(err error) bool {
	return errors.Is(err, windows.ERROR_SHARING_VIOLATION) ||
		errors.Is(err, windows.ERROR_LOCK_VIOLATION) ||
		errors.Is(err, windows.ERROR_ACCESS_DENIED)
}

// tempDir is the folder DefaultPath lives in: %TEMP%, which is also what
// Node's os.tmpdir() reads first, so that gpuexec and Node tools that put
// their lock under the temporary folder find the same one. Go's
// os.TempDir reads %TMP% first (GetTempPath2), which differs only when the
// two variables do.
func tempDir() string {
	if d := os.Getenv("TEMP"); d != "" && filepath.IsAbs(d) {
		return filepath.Clean(d)
	}
	return os.TempDir()
}

// createShared creates path exclusively (O_RDWR|O_CREATE|O_EXCL) with a
// handle that shares read, write and delete access. os.OpenFile does not
// share delete, and Windows refuses to delete a file while such a handle is
// open, even to the process that holds it: a file that is removed while
// still open and locked (a liveness file, a queue ticket) must be created
// with this.
func createShared(path string) (*os.File, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	h, err := windows.CreateFile(p, windows.GENERIC_READ|windows.GENERIC_WRITE,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE, nil,
		windows.CREATE_NEW, windows.FILE_ATTRIBUTE_NORMAL, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(h), path), nil
}

// openShared opens path for reading with a handle that shares read, write
// and delete access, so that holding it open (to probe a kernel lock)
// never makes a removal of the file fail, this process's own included.
func openShared(path string) (*os.File, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	h, err := windows.CreateFile(p, windows.GENERIC_READ,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE, nil,
		windows.OPEN_EXISTING, windows.FILE_ATTRIBUTE_NORMAL, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(h), path), nil
}
