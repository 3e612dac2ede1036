//go:build windows

package osfile

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
	SharingRetryFor   = 2 * time.Second
	sharingFirstRetry = time.Millisecond
	sharingMaxRetry   = 50 * time.Millisecond
)

// RetrySharing runs op, and runs it again while it fails with a sharing
// violation, a lock violation or access denied, for at most
// SharingRetryFor. The last error is returned.
func RetrySharing(op func() error) error {
	deadline := time.Now().Add(SharingRetryFor)
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

// TempDir is the folder DefaultPath lives in: %TEMP%, which is also what
// Node's os.tmpdir() reads first, so that gpuexec and Node tools that put
// their lock under the temporary folder find the same one. Go's
// os.TempDir reads %TMP% first (GetTempPath2), which differs only when the
// two variables do.
func TempDir() string {
	if d := os.Getenv("TEMP"); d != "" && filepath.IsAbs(d) {
		return filepath.Clean(d)
	}
	return os.TempDir()
}
