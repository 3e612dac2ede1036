// Package lock is a cross-process mutex held as a lock file created with
// O_CREAT|O_EXCL, compatible with the Node lock tool this protocol started
// from (lock/testdata/seedlock.cjs): both write the same JSON record to the
// same path, so gpuexec and that tool exclude each other on one lock.
// Comments call that tool and its record "the seed's".
//
// Guarantees, among processes using this package on one host and a local
// filesystem:
//   - at most one holds the lock at a time, whatever the interleaving,
//     including several waiters judging one stale lock at the same instant;
//   - a lock is removed only by its holder (same pid and token), or after it
//     was judged stale and re-read under rename to be the very lock judged;
//   - a holder's lock is never judged stale while, on this host, its
//     liveness lock (a kernel lock on a sidecar file that the job's
//     processes inherit) is held, whatever its heartbeat's age (a stopped
//     holder, a clock jump); nor while its heartbeat is younger than
//     Options.Stale and, for records without a liveness lock, its pid is
//     alive (EPERM counts as alive) and was started when the record says,
//     or the process group of its job still runs;
//   - a lock whose record was removed while its holder's liveness lock is
//     still held (a forced clear) stays held until that job ends;
//   - nothing read from the lock's folder becomes a path, no open there
//     follows a symbolic link or blocks on a FIFO, and only regular files
//     with this protocol's names, in that folder, are ever removed;
//   - the lock at a path stands for every device whose lock is beside it
//     (Options.Devices): it is not taken while any of them is held, and
//     none of them while it is held, whichever process came first, and
//     while they are held it holds a record in the seed's format (a
//     cover) so that the seed's tool waits too;
//   - a holder whose gpuexec is gone but whose job's process group still
//     runs on this host keeps its lock held, whatever its heartbeat's age
//     (a sharer's too);
//   - waiters that compete for a same lock are served in arrival order
//     (tickets beside the lock), but for a head of the queue that leaves a
//     free lock untaken for two seconds (a stopped waiter: it keeps its
//     place), and wake within milliseconds of a release where the folder
//     can be watched.
//
// Against the Node tool, exclusion rests on the lock file's O_CREAT|O_EXCL
// alone, as it always did: when that tool, clearing a stale lock, finds it
// set aside another lock than the one it judged and puts it back, it
// overwrites whatever was created at the path meanwhile, a window of its
// own clearing that nothing here can close.
//
// A single lock is the one-device case of a device set: Options.Devices
// names one lock per device beside Options.Path, and every function here
// takes, inspects and releases either the same way.
package lock

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
)

// The package's files, one question each:
//
//	lock.go       the API: take, inspect and clear a lock (this file)
//	options.go    Options, their defaults and checks; the lock set they name
//	devices.go    how devices' locks are named beside a lock
//	existing.go   which devices have locks beside a lock
//	errors.go     the errors callers tell apart
//	explain.go    errors that say what the user must fix (FolderError)
//	status.go     what a lock and its queue are seen as (Status, Report)
//	record.go     the lock file's record (Info): parse, encode, names
//	file.go       reading, creating and removing lock files safely
//	guard.go      the guard: the kernel lock that serializes every step
//	wait.go       Acquire's wait between tries, and what wakes it
//	try.go        one try under the guards: clear stale locks, take free ones
//	admit.go      asking Options.Admit before free locks are taken
//	queue.go      the queue's tickets
//	waiting.go    the waiting line a waiter logs
//	inspect.go    reading and judging locks without changing them
//	clear.go      Clear
//	judge.go      whether a lock is held or stale
//	observe.go    what the OS says of holders', waiters' and jobs' processes
//	held.go       Held: what a holder is given, and leaving the queue
//	heartbeat.go  a holder's heartbeat and the check that it still holds
//	release.go    letting a held lock file go
//	live.go       liveness files: a kernel lock the job inherits
//	share.go      holding a lock in shared mode (Options.ShareMiB)
//	sharers.go    the sharers of a shared lock, read from their sidecars
//	vouch_*.go    whether a sidecar's note is its owner's word, per OS
//	cover.go      one card, one lock: the cover of devices beside a lock
//	sweep.go      what holders leave beside a free lock
//	wake.go       watching the folder (watch_*.go per OS)
//	owner_*.go    the login name and a file's owner, per OS

// DefaultPath is the lock used when none is named: gpuexec/gpu.lock under
// the OS's temporary folder.
func DefaultPath() string {
	return filepath.Join(osfile.TempDir(), "gpuexec", "gpu.lock")
}

// DefaultOwner is the login user name ($USER or $LOGNAME, else the
// name of this process's user on Unix; the current user's name, without
// its domain, on Windows), made safe by SafeName, or "unknown".
func DefaultOwner() string {
	if name := loginName(); name != "" {
		return SafeName(name)
	}
	return "unknown"
}

// SafeName makes s fit to record as an owner or slug when it was not given
// by the user but found (the login name, a command's base name): each rune
// that strconv.IsPrint calls unprintable is written as Go writes it in a
// quoted string (\n, \x1b, \u202e), each byte that is not valid UTF-8 as
// \x and two hex digits, and the result is cut to at most 256 bytes of
// valid UTF-8. SafeName of its own result is that result.
func SafeName(s string) string { return safeName(s) }

// Acquire queues for the lock (or Need of the devices) until it holds it or
// ctx ends. If Acquire returns a Held, no other holder has that lock (or
// those devices) until Release returns or the Held's Lost is closed.
//
// Waiters are served first come, first served (see the package's
// guarantees for the one exception: a waiter that stops while it is next).
// A release or a clear is noticed within milliseconds where the lock's
// folder can be watched, and within Options.Poll where it cannot (network
// shares); a holder on this host whose job ended, within a fraction of a
// second. Stale locks are cleared on the way, each logged with why, and the
// holder and this waiter's place in the queue are logged every
// Options.Report.
//
// When ctx ends first the error is a *WaitError and the waiter has left the
// queue; other errors (bad options, an unusable path, a lock path that is
// not a regular file or not a lock) end the wait at once.
func Acquire(ctx context.Context, o Options) (*Held, error) {
	o, t, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	h, err := queueFor(ctx, o, t)
	return h, explain(o.Path, err)
}

// TryAcquire takes the lock (or Need of the devices) if it is free or stale
// and no waiter is queued for it, without waiting. A Held it returns is
// held as Acquire's is. Contention is a
// *WaitError wrapping ErrHeld, with the locks it saw, or ErrRefused when
// they were free but Options.Admit did not admit enough of them. It logs
// the acquired line, as Acquire does.
func TryAcquire(o Options) (*Held, error) {
	start := time.Now()
	o, t, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := makeFolder(filepath.Dir(o.Path)); err != nil {
		return nil, explain(o.Path, err)
	}
	// Each try waits at most clearGuardWait for the guards; Admit, asked
	// between two tries, ends within its own bounds.
	ws := &waitState{q: newQueue(o.Path, t.paths), tryWait: clearGuardWait}
	h, seen, err := attemptAdmitted(context.Background(), o, t, ws)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, errGuardStuck(o.Path)
	case err != nil:
		return nil, explain(o.Path, err)
	case h == nil && ws.why != "":
		return nil, &WaitError{Seen: seen, Why: ws.why, Err: ErrRefused}
	case h == nil:
		return nil, &WaitError{Seen: seen, Err: ErrHeld}
	}
	h.logAcquired(time.Since(start))
	return h, nil
}

// WithLock runs fn while holding the lock, releasing it however fn ends
// (return, error or panic). fn's context is cancelled if the lock is lost.
// The error is fn's, Acquire's or Release's.
func WithLock(ctx context.Context, o Options, fn func(ctx context.Context) error) (err error) {
	h, err := Acquire(ctx, o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.Release()) }()
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-h.Lost():
			cancel()
		case <-fctx.Done():
		}
	}()
	return fn(fctx)
}

// Inspect reads and judges the lock (or every device's) and lists its
// queue, for status displays; it changes nothing. A lock whose record is
// gone while its holder's job still runs (a forced clear) is held. A held
// lock's holder and job, and each live waiter, are told as the OS sees
// them (Status.HolderProcess, Status.JobProcess, Waiter.Process). For a
// lock asked for without devices, the device locks beside it are read and
// judged too (Report.Beside), so that one Inspect tells all that keeps
// its jobs from starting. A folder
// that does not exist is an error wrapping ErrNoFolder, and a path below
// something that is not a folder one wrapping syscall.ENOTDIR: neither is
// a free lock.
func Inspect(o Options) (*Report, error) {
	o, t, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := folderExists(filepath.Dir(o.Path)); err != nil {
		return nil, err
	}
	r := &Report{Path: o.Path}
	if r.Locks, err = inspectAll(o, t); err != nil {
		return nil, explain(o.Path, err)
	}
	for _, st := range r.Locks {
		observe(st, osProber{lockPath: st.Path})
	}
	if r.Queue, err = readQueue(o.Path, t.paths); err != nil {
		return nil, err
	}
	if t.names == nil {
		// Numbered as devices are, not in guard order (gpu2 before gpu10).
		r.Beside = judgeBeside(o)
		slices.SortStableFunc(r.Beside, func(a, b *Status) int { return compareIndex(a.Device, b.Device) })
		for _, st := range r.Beside {
			observe(st, osProber{lockPath: st.Path})
		}
	}
	return r, nil
}

// Clear removes the lock at o.Path if it is stale, and returns it as
// judged (a held lock's holder and job told as Inspect tells them). A free
// lock is not an error, and nothing is created to find it free. A live
// holder's lock is left in place and ErrHeld returned, unless force is
// set. A forced clear never puts two jobs on the GPU: a gpuexec
// holder notices within a second that its record is gone and stops its
// job, and until that job is gone its liveness file keeps the lock held for
// everyone else; the Node tool notices at its next heartbeat. Like every
// removal here, it never removes a lock created after the one it judged. Clear takes one lock: with
// devices, name a device's lock file as Path. It logs nothing of the lock
// it returns: the caller says what was cleared. Files that kept a free
// lock held, which a forced Clear removes, are logged (Options.Logger).
// A folder that does not exist, or is not a folder, is an error as
// Inspect's: no lock was cleared, nor found free.
func Clear(o Options, force bool) (*Status, error) {
	if len(o.Devices) > 0 {
		return nil, &OptionError{Option: "devices", Problem: "clear takes one lock: give a device's lock file as the path"}
	}
	if o.Need > 1 {
		return nil, &OptionError{Option: "need", Problem: fmt.Sprintf("must be 1 without devices, got %d", o.Need)}
	}
	o, err := o.withSafePath()
	if err != nil {
		return nil, err
	}
	if err := folderExists(filepath.Dir(o.Path)); err != nil {
		return nil, err
	}
	st, err := clearOne(o, force)
	if st != nil {
		observe(st, osProber{lockPath: o.Path})
	}
	return st, err
}

// Locker is a held lock of any backend: a lock file (*Held) or an etcd key
// (package etcdlock). Whoever holds one need not know which.
type Locker interface {
	// Path names the lock: the lock file's absolute path, or the etcd://
	// URL as given.
	Path() string
	// Info is the holder's record as written.
	Info() Info
	// Lost is closed when the lock was found to be no longer ours; someone
	// else may hold it from then on.
	Lost() <-chan struct{}
	// LostReason says why Lost was closed; nil while it is not.
	LostReason() error
	// RecordChild notes the process group of the job run under the lock.
	RecordChild(pgid int) error
	// Release gives the lock up if it is still ours, logging "releasing
	// GPU lock" before it gives anything up, so that the next holder's
	// acquired line comes after it. Later calls do nothing.
	Release() error
}

var _ Locker = (*Held)(nil)

// Backend takes, inspects and clears locks of one kind: Files, or an etcd
// backend (package etcdlock in-process; gpuexec's helper client).
type Backend interface {
	// Check reports what is wrong with o for this backend, touching
	// nothing (an *OptionError, or an error wrapping ErrInvalid).
	Check(o Options) error
	// Acquire queues for the lock until it is held or ctx ends (then the
	// error is a *WaitError wrapping ctx's error).
	Acquire(ctx context.Context, o Options) (Locker, error)
	// TryAcquire takes the lock if it is free and nobody is queued for
	// it; contention is a *WaitError wrapping ErrHeld.
	TryAcquire(o Options) (Locker, error)
	// Inspect reads the lock and its queue; it changes nothing.
	Inspect(o Options) (*Report, error)
	// Clear removes a stale lock (a live holder's only with force; else
	// ErrHeld) and returns it as judged.
	Clear(o Options, force bool) (*Status, error)
}

// Leased is a Backend whose locks are kept in a store that several
// machines share (an etcd cluster), each held by a lease that its holder
// renews, instead of in this machine's files. Such a lock is one lock for
// every machine that names it: it stands for no GPU of this machine in
// particular. Files is not Leased; package etcdlock's Backend is.
type Leased interface {
	Backend
	// LeaseTTL is the time to live of the lease that holds the lock o
	// names, or false when o names none of this backend's locks (Check
	// says why). A holder cut off from the store reports the lock lost
	// (Locker.Lost) two thirds of the TTL after its last renewal the store
	// confirmed; the store may give the lock to the next waiter one TTL
	// after it.
	LeaseTTL(o Options) (time.Duration, bool)
}

// Files is the lock-file backend: this package's functions.
var Files Backend = files{}

type files struct{}

// Check checks o as Validate does, and that the path names a lock file:
// not empty, and not starting SCHEME:// as a URL does (another backend's
// lock). The folder is checked when the lock is used (see FolderError),
// where the caller logs it.
func (files) Check(o Options) error {
	if err := checkFilePath(o.Path); err != nil {
		return err
	}
	return o.Validate()
}

func (files) Acquire(ctx context.Context, o Options) (Locker, error) {
	h, err := Acquire(ctx, o)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (files) TryAcquire(o Options) (Locker, error) {
	h, err := TryAcquire(o)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (files) Inspect(o Options) (*Report, error)           { return Inspect(o) }
func (files) Clear(o Options, force bool) (*Status, error) { return Clear(o, force) }

// CheckPath reports what is wrong with path as any backend's lock path,
// touching nothing: an *OptionError for "path" when it is empty. This
// package's functions (and Files) refuse too, as another backend's, a path
// that starts SCHEME:// as a URL does (etcd://h:2379/k, not C://gpu.lock);
// any other path is a file's, relative to the working folder unless
// absolute, whatever it looks like. A caller that makes a path absolute
// checks it first: filepath.Abs makes "" the working folder.
func CheckPath(path string) error { return checkPath(path) }

// ParseDevices turns a device list as users write it — indexes "0,1,3"
// (leading zeros dropped: "07" is "7"), or "all" for count devices
// 0..count-1 — into Options.Devices, checked as Validate checks them (an
// *OptionError for "devices"). A GPU's UUID is no lock's name: map it to
// its index first (nvidia-smi's), so that one card is one lock.
func ParseDevices(list string, count int) ([]string, error) { return parseDevices(list, count) }

// ExistingDevices names the devices whose lock files (or what their
// holders leave beside them) exist beside path, as Options.Devices names
// them (gpu.lock: gpu0.lock is device "0"), in index order: what jobs run
// with Devices hold. Names alone decide: only regular files whose names a
// device's lock could have count (links and everything else in the folder
// are skipped, never followed or opened); at most 64 are returned. Judge
// them with Inspect. A folder that does not exist has none; its path is
// resolved as for every lock (see FolderError).
func ExistingDevices(path string) ([]string, error) { return existingDevices(path) }

// Suspend runs stop — which stops this process, as a SIGSTOP to itself
// does, and returns once it is continued — at a moment when this process
// holds no guard of any lock, and lets it take none until stop returns. A
// process stopped while it holds a guard (a few system calls at a time)
// would make every other process of the lock wait for it.
func Suspend(stop func()) { suspend(stop) }
