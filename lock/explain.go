package lock

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/gpuexec/gpuexec/internal/osfile"
	"github.com/gpuexec/gpuexec/internal/safepath"
)

// shareHint is how several users share a lock: a folder that their group
// may write (setgid, so that every file in it belongs to the group), in
// which gpuexec makes every file group-writable.
const shareHint = "to share a GPU among users, use a folder that all of them can write: " +
	"sudo groupadd -f gpu && sudo install -d -m 2775 -g gpu /var/lib/gpuexec, add the users to group gpu, " +
	"and give them all --lock /var/lib/gpuexec/gpu.lock (or GPUEXEC_LOCK)"

func (e *FolderError) Error() string {
	what := "cannot use the lock folder " + e.Dir
	if e.Holder != "" {
		what = "cannot clear the stale lock of " + e.Holder + " in " + e.Dir
	}
	if errors.Is(e.Err, osfile.ErrNotSetgid) {
		// Its one fix, in one line.
		return fmt.Sprintf("lock: %s (%s): its group may write it, but it is not setgid, so each file in it would belong "+
			"to its creator's primary group, which other members may not be in and users outside the folder's group may; "+
			"run: chmod g+s %s && chgrp -R %s %s", what, describeFolder(e.Dir), e.Dir, folderGroup(e.Dir), e.Dir)
	}
	if errors.Is(e.Err, osfile.ErrOpenToAll) {
		return fmt.Sprintf("lock: %s (%s): every user may write it, and it is not sticky, so anyone could remove or replace "+
			"the lock's files; run: chmod o-w %s (a group folder), or chmod +t %s (open to all, as /tmp)",
			what, describeFolder(e.Dir), e.Dir, e.Dir)
	}
	var se *safepath.Error
	if errors.As(e.Err, &se) {
		// It says who controls what, already.
		return fmt.Sprintf("lock: %s: %v; %s", what, e.Err, shareHint)
	}
	desc := describeFolder(e.Dir)
	if desc != "" {
		desc = " (" + desc + ")"
	}
	return fmt.Sprintf("lock: %s%s: %v; %s", what, desc, e.Err, shareHint)
}

func (e *FolderError) Unwrap() error { return e.Err }

// explain turns a permission error from the folder of lockPath, or the
// refusal of its folder's mode (a group folder without setgid, one every
// user may write that is not sticky), into a *FolderError; other errors
// are returned as they are.
func explain(lockPath string, err error) error {
	var fe *FolderError
	refused := errors.Is(err, osfile.ErrNotSetgid) || errors.Is(err, osfile.ErrOpenToAll)
	if err == nil || !errors.Is(err, fs.ErrPermission) && !refused || errors.As(err, &fe) {
		return err
	}
	return &FolderError{Dir: filepath.Dir(lockPath), Err: err}
}

// explainClear is explain for the failed clearing of the stale lock st.
func explainClear(lockPath string, st *Status, err error) error {
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	return &FolderError{Dir: filepath.Dir(lockPath), Holder: st.Holder(), Err: err}
}

// FolderError is an error from the lock's folder that the user must fix:
// this user may not create or remove files there. It names the folder,
// who owns it and how it may be written, and how several users share a
// lock.
type FolderError struct {
	// Dir is the lock's folder.
	Dir string
	// Holder is set when the error came from clearing a stale lock.
	Holder string
	Err    error
}
