//go:build unix && !linux

package osfile

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Touch sets the open file's access and modification times to t
// (futimes), so that a heartbeat changes the file it checked, never
// whatever the path names by then.
func Touch(f *os.File, t time.Time) error {
	tv := unix.NsecToTimeval(t.UnixNano())
	if err := unix.Futimes(int(f.Fd()), []unix.Timeval{tv, tv}); err != nil {
		return &os.PathError{Op: "futimes", Path: f.Name(), Err: err}
	}
	return nil
}
