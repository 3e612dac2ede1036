package supervisor

import (
	"context"
	"errors"
	"os"
	"strings"

	"github.com/gpuexec/gpuexec/lock"
)

// Environment variables set for the child in device mode (Config.Devices).
const (
	EnvGPU  = "GPUEXEC_GPU"          // the devices held, comma-separated
	EnvCUDA = "CUDA_VISIBLE_DEVICES" // the same, for CUDA programs
)

// holding is what a job runs under: one lock, or a set of device locks.
// The supervisor does not care which.
type holding interface {
	Lost() <-chan struct{}
	Release() error
	// NoteChild and RecordChild tell the lock the job's process group:
	// the first at once and cheaply (the liveness file), the second in the
	// record, for status.
	NoteChild(pgid int) error
	RecordChild(pgid int) error
	// liveFiles are the liveness files the child inherits.
	liveFiles() []*os.File
	// env is what the child's environment gets besides EnvLockHeld.
	env() []string
	// logFields add to the "job started" line.
	logFields() []any
}

type oneLock struct{ *lock.Held }

func (h oneLock) liveFiles() []*os.File { return []*os.File{h.LiveFile()} }
func (h oneLock) env() []string {
	return []string{EnvLockPath + "=" + h.Path(), EnvLockToken + "=" + h.Info().Token}
}
func (h oneLock) logFields() []any { return nil }

// remoteLock is a lock of another backend than files (an etcd:// lock):
// the child inherits nothing, and GPUEXEC_LOCK_PATH is the lock's URL.
type remoteLock struct{ lock.Locker }

func (remoteLock) liveFiles() []*os.File { return nil }

// NoteChild: a remote lock lives by its lease, not by processes here; the
// group goes into its record with RecordChild.
func (remoteLock) NoteChild(int) error { return nil }
func (h remoteLock) env() []string {
	return []string{EnvLockPath + "=" + h.Path(), EnvLockToken + "=" + h.Info().Token}
}
func (remoteLock) logFields() []any { return nil }

// errRemoteDevices refuses --gpus with an etcd lock.
var errRemoteDevices = errors.New("several GPUs (--gpus) need a lock file: an etcd:// lock names one lock; use one etcd key per GPU instead")

type deviceLocks struct {
	*lock.DeviceSet
	base string
}

func (d deviceLocks) liveFiles() []*os.File { return d.LiveFiles() }
func (d deviceLocks) logFields() []any      { return []any{"gpus", d.Names()} }
func (d deviceLocks) env() []string {
	names := d.Names()
	var tokens []string
	for _, h := range d.Held() {
		tokens = append(tokens, h.Info().Token)
	}
	return []string{EnvLockPath + "=" + d.base, EnvLockToken + "=" + strings.Join(tokens, ","),
		EnvGPU + "=" + names, EnvCUDA + "=" + names}
}

// tryTake takes the lock (or devices) without waiting.
func tryTake(cfg Config) (holding, bool, error) {
	if lock.IsRemote(cfg.Lock.Path) {
		if len(cfg.Devices) > 0 {
			return nil, false, errRemoteDevices
		}
		h, ok, err := lock.BackendFor(cfg.Lock.Path).TryAcquire(cfg.Lock)
		if !ok {
			return nil, ok, err
		}
		return remoteLock{h}, true, err
	}
	if len(cfg.Devices) == 0 {
		h, ok, err := lock.TryAcquire(cfg.Lock)
		if !ok {
			return nil, ok, err
		}
		return oneLock{h}, true, err
	}
	set, ok, err := lock.TryAcquireDevices(cfg.Lock, cfg.Devices, cfg.need())
	if !ok {
		return nil, ok, err
	}
	return deviceLocks{set, cfg.Lock.Path}, true, err
}

// take queues for the lock (or devices) until ctx ends.
func take(ctx context.Context, cfg Config) (holding, error) {
	if lock.IsRemote(cfg.Lock.Path) {
		if len(cfg.Devices) > 0 {
			return nil, errRemoteDevices
		}
		h, err := lock.BackendFor(cfg.Lock.Path).Acquire(ctx, cfg.Lock)
		if err != nil {
			return nil, err
		}
		return remoteLock{h}, nil
	}
	if len(cfg.Devices) == 0 {
		h, err := lock.Acquire(ctx, cfg.Lock)
		if err != nil {
			return nil, err
		}
		return oneLock{h}, nil
	}
	set, err := lock.AcquireDevices(ctx, cfg.Lock, cfg.Devices, cfg.need())
	if err != nil {
		return nil, err
	}
	return deviceLocks{set, cfg.Lock.Path}, nil
}

// holders names who holds the lock (or each device) now, for messages.
func holders(cfg Config) string {
	if len(cfg.Devices) == 0 {
		if st, err := lock.BackendFor(cfg.Lock.Path).Inspect(cfg.Lock); err == nil && st.State != lock.StateFree {
			return st.Holder()
		}
		return "another job"
	}
	sts, err := lock.InspectDevices(cfg.Lock.Path, cfg.Devices, cfg.Lock.Stale)
	if err != nil {
		return "other jobs"
	}
	parts := make([]string, len(sts))
	for i, st := range sts {
		parts[i] = "GPU " + cfg.Devices[i].Name + ": "
		if st.State == lock.StateFree {
			parts[i] += "free"
		} else {
			parts[i] += st.Holder()
		}
	}
	return strings.Join(parts, ", ")
}
