package supervisor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/lock"
)

// nested finds the lock that a gpuexec running this process's job already
// holds, when it is the very lock (or devices) cfg asks for. A job that
// runs gpuexec again (a render script that wraps its own GPU step) would
// otherwise queue behind its own parent until --wait gives up. The
// parent's child-facing variables (EnvLockHeld, EnvLockPath, EnvLockToken,
// EnvGPU) say which lock and token; the lock is then read to be held now
// with that token, by a holder on this host that is an ancestor of this
// process. Anyone can read a token in the lock's record and set the
// variables: only descent from the holder proves that this process runs
// inside its job. It returns the holder, for the log.
func nested(cfg Config) (jobLock, string, bool) {
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	get := func(k string) string {
		for i := len(env) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(env[i], k+"="); ok {
				return v
			}
		}
		return ""
	}
	if get(EnvLockHeld) != "1" || !sameLockPath(get(EnvLockPath), cfg.Lock.Path, machineLocal(cfg.Backend)) {
		return nil, "", false
	}
	tokens := strings.Split(get(EnvLockToken), ",")
	r, err := cfg.backend().Inspect(cfg.Lock)
	if err != nil {
		return nil, "", false
	}
	heldBy := func(st *lock.Status, token string) (string, bool) {
		if st.State != lock.StateHeld || st.Info == nil || st.Info.Token != token ||
			!proc.SameHost(st.Info.Host) || !descendsFrom(st.Info.PID) {
			return "", false
		}
		return st.Holder(), true
	}
	if len(cfg.Lock.Devices) == 0 {
		if get(EnvGPU) != "" || len(tokens) != 1 || len(r.Locks) != 1 {
			return nil, "", false // the parent holds devices, not this lock
		}
		who, ok := heldBy(r.Locks[0], tokens[0])
		return inheritedLock{}, who, ok
	}
	// Devices: the parent's devices must be among the ones asked for,
	// as many as needed, each held with its token.
	names := strings.Split(get(EnvGPU), ",")
	if len(names) != len(tokens) || len(names) < max(cfg.Lock.Need, 1) {
		return nil, "", false
	}
	var who []string
	for i, n := range names {
		j := slices.IndexFunc(r.Locks, func(st *lock.Status) bool { return st.Device == n })
		if j < 0 {
			return nil, "", false
		}
		w, ok := heldBy(r.Locks[j], tokens[i])
		if !ok {
			return nil, "", false
		}
		who = append(who, w)
	}
	return inheritedLock{}, strings.Join(slices.Compact(who), ", "), true
}

// sameLockPath reports whether two lock paths name the same lock: the same
// string, or, for lock files, the same name in the same folder however the
// folder was reached (the parent's path is resolved, one given by hand may
// go through a link). Other backends' paths (URLs) are compared as they
// are.
func sameLockPath(a, b string, files bool) bool {
	if a == b {
		return true
	}
	if a == "" || !files || filepath.Base(a) != filepath.Base(b) {
		return false
	}
	da, err1 := os.Stat(filepath.Dir(a))
	db, err2 := os.Stat(filepath.Dir(b))
	return err1 == nil && err2 == nil && os.SameFile(da, db)
}

// descendsFrom reports whether pid is an ancestor of this process.
func descendsFrom(pid int) bool {
	if pid <= 1 {
		return false
	}
	seen := map[int]bool{}
	for p := os.Getpid(); p > 1 && !seen[p]; {
		seen[p] = true
		up, ok := proc.Parent(p)
		if !ok {
			return false
		}
		if up == pid {
			return true
		}
		p = up
	}
	return false
}

// inheritedLock is the lock (or devices) of a gpuexec running this
// process's job (see nested): held by that gpuexec, which also releases
// it. The command runs under it at once and inherits the environment that
// names it as it is.
type inheritedLock struct{}

func (inheritedLock) Lost() <-chan struct{} { return nil }
func (inheritedLock) Release() error        { return nil }
func (inheritedLock) NoteChild(int) error   { return nil }
func (inheritedLock) RecordChild(int) error { return nil }
func (inheritedLock) liveFiles() []*os.File { return nil }
func (inheritedLock) env() []string         { return nil }
func (inheritedLock) logFields() []any      { return []any{"reentrant", true} }
func (inheritedLock) jobStarted()           {}
