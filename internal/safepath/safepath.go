// Package safepath resolves a folder that gpuexec uses again and again by
// name — the lock's folder, the --log file's folder — to one that no other
// user can redirect: every folder on the resolved path is real (no
// symbolic link), and no other user can rename or replace any of them.
// Then whatever is found or created there by name is there, and nowhere
// else, for as long as gpuexec runs.
//
// A folder's entry can be renamed or replaced by the folder's owner, by
// whoever may write the folder, and, in a sticky folder (/tmp), by the
// entry's own owner. So each folder on the path must belong to this user or
// root, and either be writable by nobody else, or be sticky with the next
// entry belonging to this user or root. A symbolic link on the path is
// followed only under the same conditions, and must itself belong to this
// user or root.
package safepath

import "fmt"

// Error says why a path is not safe to use.
type Error struct {
	Path string // the folder or link that another user controls
	Why  string
	// Owner is the uid that controls it (-1: not one user's).
	Owner int
}

func (e *Error) Error() string { return fmt.Sprintf("%s %s", e.Path, e.Why) }
