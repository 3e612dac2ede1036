//go:build windows

package lock

import "os"

// vouch is "" on Windows: the processes every live sidecar names are its
// sharer's (see Sharer.Unattributed). Who may create files in the lock's
// folder is its ACL's to say; a file's owner is not compared with the
// processes a sidecar names here (see vouch_unix.go).
func vouch(*os.File, Sharer) string { return "" }

// ownersWord is "" on Windows: a file's owner is not compared with the
// processes it names (see vouch).
func ownersWord(*os.File, int) string { return "" }

// othersMayWrite is false on Windows: who may write a file is its ACL's to
// say, which os.FileMode does not show.
func othersMayWrite(os.FileInfo) bool { return false }

// fileOwner is not told on Windows: a file's owner is not compared with
// the processes it names (see vouch).
func fileOwner(os.FileInfo) (uid int, ok bool) { return 0, false }

// groupUID is not told on Windows, which has no process groups.
func (osProber) groupUID(int) (int, bool) { return 0, false }
