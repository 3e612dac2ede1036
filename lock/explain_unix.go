//go:build unix

package lock

import (
	"fmt"
	"os"
	"syscall"
)

// describeFolder says who owns dir and how it may be written:
// "owned by alice (uid 1000), drwxr-xr-x", and that a sticky folder lets
// only a file's owner (or root) remove it.
func describeFolder(dir string) string {
	fi, err := os.Stat(dir)
	if err != nil {
		return ""
	}
	s := fi.Mode().String()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s = fmt.Sprintf("owned by %s (uid %d), %s", userName(int(st.Uid)), st.Uid, s)
	}
	if fi.Mode()&os.ModeSticky != 0 {
		s += ", sticky: only a file's owner or root may remove it"
	}
	return s + fmt.Sprintf("; this is uid %d", os.Geteuid())
}

// folderGroup is dir's group, as a number ("?" when it cannot be read).
func folderGroup(dir string) string {
	if fi, err := os.Stat(dir); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			return fmt.Sprint(st.Gid)
		}
	}
	return "?"
}
