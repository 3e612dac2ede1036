package supervisor

import (
	"context"
	"os"
	"strings"

	"github.com/gpuexec/gpuexec/lock"
)

// Environment variables set for the child in device mode (lock.Options'
// Devices).
const (
	EnvGPU  = "GPUEXEC_GPU"          // the devices held, comma-separated
	EnvCUDA = "CUDA_VISIBLE_DEVICES" // the same, for CUDA programs
)

// jobLock is the lock a job runs under: a lock file (or device set), a lock of
// another backend, or a parent's lock (nested). The supervisor does not
// care which.
type jobLock interface {
	Lost() <-chan struct{}
	Release() error
	// NoteChild and RecordChild tell the lock the job's process group:
	// the first at once and cheaply (the liveness files), the second in
	// the record, for status.
	NoteChild(pgid int) error
	RecordChild(pgid int) error
	// liveFiles are the liveness files the child inherits.
	liveFiles() []*os.File
	// env is what the child's environment gets besides EnvLockHeld.
	env() []string
	// logFields add to the "job started" line.
	logFields() []any
	// jobStarted tells the lock that the job has started: what only the
	// wait for it needed (a lock file's place in the queue) goes now,
	// beside that start.
	jobStarted()
}

// heldFiles is a lock of lock files (lock.Held): one lock file, or the
// devices of a device set.
type heldFiles struct{ *lock.Held }

func (h heldFiles) liveFiles() []*os.File { return h.LiveFiles() }
func (h heldFiles) jobStarted()           { h.LeaveQueue() }
func (h heldFiles) env() []string {
	env := []string{EnvLockPath + "=" + h.Path(), EnvLockToken + "=" + strings.Join(h.Tokens(), ",")}
	if devs := h.Devices(); devs != nil {
		names := strings.Join(devs, ",")
		env = append(env, EnvGPU+"="+names, EnvCUDA+"="+names, EnvDeviceOrder+"=PCI_BUS_ID")
	}
	return env
}
func (h heldFiles) logFields() []any {
	if devs := h.Devices(); devs != nil {
		return []any{"devices", strings.Join(devs, ",")}
	}
	return nil
}

// remoteLock is a lock of another backend than files (an etcd:// lock):
// GPUEXEC_LOCK_PATH is the lock's URL, and the child inherits the lock's
// liveness files if it is a liveLocker.
type remoteLock struct{ lock.Locker }

// liveLocker is a lock that, like a lock file, stays held for a job whose
// gpuexec died while the job runs: its job inherits LiveFiles, and
// NoteChild tells it the job's process group the moment the job starts.
// The etcd helper's locks are (package etcdhelper).
type liveLocker interface {
	LiveFiles() []*os.File
	NoteChild(pgid int) error
}

func (h remoteLock) liveFiles() []*os.File {
	if l, ok := h.Locker.(liveLocker); ok {
		return l.LiveFiles()
	}
	return nil
}

// NoteChild passes the group on to a liveLocker; another lock lives by
// its lease alone, and the group goes into its record with RecordChild.
func (h remoteLock) NoteChild(pgid int) error {
	if l, ok := h.Locker.(liveLocker); ok {
		return l.NoteChild(pgid)
	}
	return nil
}
func (h remoteLock) env() []string {
	return []string{EnvLockPath + "=" + h.Path(), EnvLockToken + "=" + h.Info().Token}
}
func (remoteLock) logFields() []any { return nil }
func (remoteLock) jobStarted()      {}

// jobLockOf wraps what a backend returned.
func jobLockOf(l lock.Locker) jobLock {
	if h, ok := l.(*lock.Held); ok {
		return heldFiles{h}
	}
	return remoteLock{l}
}

// tryTake takes the lock (or devices) without waiting; contention is a
// *lock.WaitError wrapping lock.ErrHeld.
func tryTake(cfg Config) (jobLock, error) {
	l, err := cfg.backend().TryAcquire(cfg.Lock)
	if err != nil {
		return nil, err
	}
	return jobLockOf(l), nil
}

// take queues for the lock (or devices) until ctx ends.
func take(ctx context.Context, cfg Config) (jobLock, error) {
	l, err := cfg.backend().Acquire(ctx, cfg.Lock)
	if err != nil {
		return nil, err
	}
	return jobLockOf(l), nil
}
