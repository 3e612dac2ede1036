//go:build windows

package osfile

import (
	"os"
	"time"

	"golang.org/x/sys/windows"
)

// Touch sets the open file's modification time to t through its
// handle (SetFileTime), so that a heartbeat changes the file it checked,
// never whatever the path names by then. The handle must have been opened
// with FILE_WRITE_ATTRIBUTES (see OpenToTouch), or for writing.
func Touch(f *os.File, t time.Time) error {
	ft := windows.NsecToFiletime(t.UnixNano())
	if err := windows.SetFileTime(windows.Handle(f.Fd()), nil, &ft, &ft); err != nil {
		return &os.PathError{Op: "SetFileTime", Path: f.Name(), Err: err}
	}
	return nil
}
