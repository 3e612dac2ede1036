package lock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Device is one GPU with a lock of its own.
type Device struct {
	// Name is what CUDA_VISIBLE_DEVICES calls the device: "0", "1", or a
	// GPU UUID.
	Name string
	// Path is the device's lock file, an ordinary lock of this package:
	// jobs may also take it on its own with Acquire.
	Path string
}

// DevicesBeside names one lock per device beside base, inserting the
// device's name before base's extension: gpu.lock → gpu0.lock, gpu1.lock.
// The queue for the devices is base's (its tickets and guard).
func DevicesBeside(base string, names []string) []Device {
	dir, file := filepath.Split(base)
	ext := filepath.Ext(file)
	stem := strings.TrimSuffix(file, ext)
	out := make([]Device, len(names))
	for i, n := range names {
		out[i] = Device{Name: n, Path: filepath.Join(dir, stem+n+ext)}
	}
	return out
}

// DeviceSet is the devices one job holds: an ordinary held lock on each.
type DeviceSet struct {
	devices []Device
	held    []*Held

	lost     chan struct{}
	lostOnce sync.Once
	stop     chan struct{}
	watchers sync.WaitGroup
}

// ErrBadDevices is wrapped by errors about the devices asked for.
var ErrBadDevices = errors.New("lock: invalid devices")

// checkDevices validates the devices and returns a copy with absolute
// paths.
func checkDevices(o Options, devices []Device, need int) ([]Device, error) {
	if len(devices) == 0 {
		return nil, fmt.Errorf("%w: no devices", ErrBadDevices)
	}
	if need < 1 || need > len(devices) {
		return nil, fmt.Errorf("%w: need %d of %d devices", ErrBadDevices, need, len(devices))
	}
	devices = append([]Device(nil), devices...)
	seen := map[string]bool{}
	for i := range devices {
		d := &devices[i]
		if d.Path != "" {
			abs, err := resolve(d.Path)
			if err != nil {
				return nil, err
			}
			d.Path = abs
		}
		switch {
		case d.Name == "" || d.Path == "":
			return nil, fmt.Errorf("%w: a device without a name or lock path", ErrBadDevices)
		case seen[d.Name] || seen[d.Path]:
			return nil, fmt.Errorf("%w: device %s named twice", ErrBadDevices, d.Name)
		case filepath.Dir(d.Path) != filepath.Dir(o.Path):
			return nil, fmt.Errorf("%w: device %s's lock %s is not beside %s", ErrBadDevices, d.Name, d.Path, o.Path)
		case d.Path == o.Path:
			return nil, fmt.Errorf("%w: device %s's lock is the queue's own lock path", ErrBadDevices, d.Name)
		}
		seen[d.Name], seen[d.Path] = true, true
	}
	return devices, nil
}

// AcquireDevices queues for need of the devices and holds the first ones
// free. There is one queue for all the devices, kept beside o.Path (its
// tickets and guard; o.Path itself is never created): waiters are served in
// arrival order, the head taking whichever devices are free, so a job never
// waits for one card while another idles. A job that needs several takes
// them all at once or none, under the queue's guard, so two such jobs can
// never deadlock holding one each. Waiting, logging, stale clearing and
// errors are as for Acquire; every device's lock is an ordinary lock, so
// `gpuexec status --lock gpu1.lock` and jobs that take one device by its
// path still work.
func AcquireDevices(ctx context.Context, o Options, devices []Device, need int) (*DeviceSet, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if devices, err = checkDevices(o, devices, need); err != nil {
		return nil, err
	}
	locks := lockPaths(devices)
	var set *DeviceSet
	err = queueFor(ctx, o, locks, func(ctx context.Context, pl *place) (bool, []*Status, error) {
		got, seen, err := attemptDevices(ctx, o, devices, need, pl)
		set = got
		return got != nil, seen, err
	})
	return set, explain(o.Path, err)
}

// attemptDevices is attempt for a device set: under the queue's guard, and
// each device's own guard in the devices' order, settle every device
// (clearing stale locks) and, at the head of the queue (or passing heads
// that left devices free, pl.pass) with need devices free, create their
// locks.
func attemptDevices(ctx context.Context, o Options, devices []Device, need int, pl *place) (*DeviceSet, []*Status, error) {
	if pl.tk == nil {
		// The queue's own path is no lock here, but a user's --lock:
		// what is there must be a lock file too, or nothing.
		for _, p := range append([]string{o.Path}, pl.q.paths...) {
			if err := refuseNonLock(p); err != nil {
				return nil, nil, err
			}
		}
	}
	g, err := takeGuard(ctx, o.Path)
	if err != nil {
		return nil, nil, err
	}
	defer g.release()
	before, err := queuePlace(g, o, pl)
	if err != nil {
		return nil, nil, err
	}
	for range maxAttempts {
		seen, guards, err := settleDevices(ctx, o, devices)
		if err != nil {
			return nil, nil, err
		}
		var free []int
		for i, st := range seen {
			if st.State == StateFree {
				free = append(free, i)
			}
		}
		if before > pl.pass || len(free) < need {
			releaseGuards(guards)
			return nil, seen, nil
		}
		set, err := createDevices(o, devices, free[:need])
		releaseGuards(guards)
		if errors.Is(err, os.ErrExist) {
			continue // someone outside the queue took one meanwhile
		}
		if err != nil {
			return nil, nil, err
		}
		if before > 0 {
			o.Logger.Warn(fmt.Sprintf("took free GPUs ahead of %d waiter(s) that left them untaken for %s (stopped?); they keep their places", before, headGrace), "path", o.Path)
		}
		pl.leave()
		return set, nil, nil
	}
	return nil, nil, nil
}

// settleDevices settles every device under its own guard, which it keeps
// (the caller releases them) so that the free ones stay free among gpuexec
// processes until they are created.
func settleDevices(ctx context.Context, o Options, devices []Device) ([]*Status, []*guard, error) {
	seen := make([]*Status, len(devices))
	guards := make([]*guard, 0, len(devices))
	for i, d := range devices {
		od := o
		od.Path = d.Path
		gd, err := takeGuard(ctx, d.Path)
		if err != nil {
			releaseGuards(guards)
			return nil, nil, err
		}
		guards = append(guards, gd)
		if seen[i], err = settle(od); err != nil {
			releaseGuards(guards)
			return nil, nil, err
		}
	}
	return seen, guards, nil
}

func releaseGuards(guards []*guard) {
	for _, g := range guards {
		g.release()
	}
}

// createDevices creates the locks of devices[idx...], all or none.
func createDevices(o Options, devices []Device, idx []int) (*DeviceSet, error) {
	set := &DeviceSet{lost: make(chan struct{}), stop: make(chan struct{})}
	for _, i := range idx {
		od := o
		od.Path = devices[i].Path
		h, err := create(od)
		if err != nil {
			// Roll back under the device guards the caller holds.
			for _, got := range set.held {
				got.stopHeartbeat()
				got.removeGuarded()
			}
			return nil, err
		}
		set.devices = append(set.devices, devices[i])
		set.held = append(set.held, h)
	}
	for _, h := range set.held {
		set.watchers.Add(1)
		go func() {
			defer set.watchers.Done()
			select {
			case <-h.Lost():
				set.lostOnce.Do(func() { close(set.lost) })
			case <-set.stop:
			}
		}()
	}
	return set, nil
}

// lockPaths are the devices' lock files.
func lockPaths(devices []Device) []string {
	paths := make([]string, len(devices))
	for i, d := range devices {
		paths[i] = d.Path
	}
	return paths
}

// Devices are the devices held, in the order they were listed.
func (s *DeviceSet) Devices() []Device { return append([]Device(nil), s.devices...) }

// Names are the held devices' names, comma-separated: the value for
// CUDA_VISIBLE_DEVICES.
func (s *DeviceSet) Names() string {
	names := make([]string, len(s.devices))
	for i, d := range s.devices {
		names[i] = d.Name
	}
	return strings.Join(names, ",")
}

// Held are the held locks, one per device.
func (s *DeviceSet) Held() []*Held { return append([]*Held(nil), s.held...) }

// Lost is closed when any of the device locks is lost.
func (s *DeviceSet) Lost() <-chan struct{} { return s.lost }

// LiveFiles are the devices' liveness files (see Held.LiveFile).
func (s *DeviceSet) LiveFiles() []*os.File {
	files := make([]*os.File, len(s.held))
	for i, h := range s.held {
		files[i] = h.LiveFile()
	}
	return files
}

// NoteChild is Held.NoteChild for every device.
func (s *DeviceSet) NoteChild(pgid int) error {
	var errs []error
	for _, h := range s.held {
		errs = append(errs, h.NoteChild(pgid))
	}
	return errors.Join(errs...)
}

// RecordChild records the job's process group in every device's lock.
func (s *DeviceSet) RecordChild(pgid int) error {
	var errs []error
	for _, h := range s.held {
		errs = append(errs, h.RecordChild(pgid))
	}
	return errors.Join(errs...)
}

// Release releases every device's lock. Safe to call more than once.
func (s *DeviceSet) Release() error {
	var errs []error
	for _, h := range s.held {
		errs = append(errs, h.Release())
	}
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.watchers.Wait()
	return errors.Join(errs...)
}

// InspectDevices is Inspect for every device, with the queue kept beside
// base (each device's own Queue is that one too).
func InspectDevices(base string, devices []Device, stale time.Duration) ([]*Status, error) {
	out := make([]*Status, len(devices))
	var queue []Waiter
	for i, d := range devices {
		st, err := Inspect(d.Path, stale)
		if err != nil {
			return nil, err
		}
		out[i] = st
	}
	abs, err := resolve(base)
	if err != nil {
		return nil, err
	}
	if queue, err = readQueue(abs, lockPaths(devices)); err != nil {
		return nil, err
	}
	for _, st := range out {
		st.Queue = queue
	}
	return out, nil
}

// TryAcquireDevices takes need of the devices if that many are free (or
// stale) and nobody is queued for them, without waiting. Contention is not
// an error: it returns (nil, false, nil).
func TryAcquireDevices(o Options, devices []Device, need int) (*DeviceSet, bool, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, false, err
	}
	if devices, err = checkDevices(o, devices, need); err != nil {
		return nil, false, err
	}
	if err := makeFolder(filepath.Dir(o.Path)); err != nil {
		return nil, false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), clearGuardWait)
	defer cancel()
	set, _, err := attemptDevices(ctx, o, devices, need, &place{q: newQueue(o.Path, lockPaths(devices))})
	if errors.Is(err, context.DeadlineExceeded) {
		err = errGuardStuck(o.Path)
	}
	return set, set != nil, explain(o.Path, err)
}
