// Package lock is a cross-process mutex held as a lock file created with
// O_CREAT|O_EXCL, compatible with the Node lock tool this protocol started
// from (lock/testdata/seedlock.cjs): both write the same JSON record to the
// same path, so gpuexec and that tool exclude each other on one lock.
// Comments call that tool and its record "the seed's".
//
// This file holds the package's API, every exported type and function (the
// methods that print a Status or Report are in report.go); everything else
// is unexported. Guarantees, among processes using this package on one host
// and a local filesystem:
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
//     free lock untaken for headGrace, and wake within milliseconds of a
//     release where the folder can be watched.
//
// Against the Node tool, exclusion rests on the lock file's O_CREAT|O_EXCL
// alone, as it always did (see removeIfSame for the one window that the
// tool's own clearing leaves open).
//
// A single lock is the one-device case of a device set: Options.Devices
// names one lock per device beside Options.Path, and every function here
// takes, inspects and releases either the same way.
package lock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/lost"
	"github.com/gpuexec/gpuexec/internal/osfile"
	"github.com/gpuexec/gpuexec/internal/proc"
)

// Defaults for zero Options fields; the Node tool's values.
const (
	DefaultPoll      = 20 * time.Second
	DefaultReport    = 5 * time.Minute
	DefaultHeartbeat = 5 * time.Minute
	DefaultStale     = 90 * time.Minute
)

// MinInterval is the shortest Poll, Report, Heartbeat and Stale allowed:
// each is work done while waiting or holding (a heartbeat takes the guard
// and touches the lock), and a nanosecond would keep a core busy doing it.
const MinInterval = time.Millisecond

// DefaultPath is the lock used when none is named: gpuexec/gpu.lock under
// the OS's temporary folder.
func DefaultPath() string {
	return filepath.Join(osfile.TempDir(), "gpuexec", "gpu.lock")
}

// DefaultOwner is the login user name (see loginName for where it comes
// from on each OS), or "unknown".
func DefaultOwner() string {
	if name := loginName(); name != "" {
		return SafeName(name)
	}
	return "unknown"
}

// SafeName makes s fit to record as an owner or slug when it was not given
// by the user but found (the login name, a command's base name): control
// characters are escaped and it is cut to 256 bytes.
func SafeName(s string) string { return safeName(s) }

// Options says which lock to take and how to behave while waiting and
// holding. Zero durations take the Default values.
type Options struct {
	// Path is the lock file; its folder is created if missing. With
	// Devices it is where their shared queue is kept (its guard and
	// tickets), and no lock file is made at Path itself.
	Path string
	// Devices, when set, are GPUs with a lock file each beside Path, the
	// device's index before Path's extension: gpu.lock → gpu0.lock,
	// gpu1.lock. A name is the device's index as nvidia-smi numbers it
	// (what CUDA_VISIBLE_DEVICES means with CUDA_DEVICE_ORDER=PCI_BUS_ID),
	// in decimal without leading zeros, 0 to 63, so that one card is one
	// lock; at most 64 devices. The lock at Path then holds a cover while
	// any device is held, and Path's name must not end in a digit. A
	// device's lock named as Path without Devices is that device (see
	// Canonical).
	Devices []string
	// Need is how many of Devices a holder takes at once (0: 1). Waiters
	// are served in arrival order, the head taking whichever devices are
	// free, all it needs at once or none, so that two jobs can never
	// deadlock holding one each.
	Need int
	// Owner and Slug are recorded in the lock: who holds it and which job.
	Owner, Slug string
	// Poll is how often a waiter re-checks everything (the fallback where
	// the folder cannot be watched).
	Poll time.Duration
	// Report is how often a waiter logs the current holder.
	Report time.Duration
	// Heartbeat is how often a holder touches the lock file's mtime.
	Heartbeat time.Duration
	// Stale is the heartbeat age after which a lock is stale.
	Stale time.Duration
	// HoldLimit is the longest the holder will hold the lock (a job's
	// timeout): the record then says when that ends (Info.Deadline), and
	// waiters show it. 0 (or less) records none. Nothing here enforces it.
	HoldLimit time.Duration
	// Logger receives the waiting, acquired, stale-cleared, lost and
	// releasing lines. They name the lock, not the caller: a caller whose
	// lines must be told apart from others' gives a Logger With its own
	// fields (gpuexec gives owner, slug and its pid). A waiting line
	// says the holder and the queue in its message, and has no fields
	// that repeat it (see Status.WaitingLine). Nil logs nothing.
	Logger hclog.Logger
	// Admit, when set, is asked whether free locks may be taken now (the
	// gpuexec command asks whether the device has the free video memory
	// the job needs). A caller whose turn it is and that finds locks
	// free calls it outside every guard with their device names (for a
	// single lock, the one name ""), and takes only the devices it
	// admits, in Devices' order. When too few are admitted the caller
	// keeps its place at the front of the queue (those behind it do not
	// pass it: it is not stopped, it waits), and asks again every
	// second. Admit may take a while (a second or so: it samples the
	// device) and must return when ctx ends. It returns, for each name,
	// whether that device may be taken, and a line saying what is in the
	// way, for the waiting line and WaitError.Why.
	Admit func(ctx context.Context, devices []string) (ok []bool, why string)
	// ShareMiB, when above 0, makes the holder a sharer with a budget of
	// that many MiB of video memory: it may take a device whose lock is
	// free, or join one held in shared mode by other sharers, and other
	// sharers may join it; a holder without ShareMiB takes a device alone
	// and never joins a shared lock. Sharers queue in the one queue, in
	// arrival order with everyone else: a sharer behind a waiter that
	// competes for the same device does not join a shared lock before
	// that waiter is served. While any sharer (or its job) runs, the lock
	// file holds one record in the seed's format with "share": true (see
	// Info.Share), so that the seed's tool sees the device busy; it is
	// removed when the last sharer leaves, or judged stale once none is
	// alive (by the kernel's locks, never by a timer alone). Admit is not
	// asked for sharers: AdmitShare is.
	ShareMiB int64
	// AdmitShare is Admit for a sharer: asked, as Admit is, with every
	// device it could take now, free or held in shared mode, and the
	// live sharers on each as read under the device's guard. A device
	// whose sharers' budgets grew after the answer is asked about again
	// before it is joined. Nil admits every candidate (the budgets are
	// then recorded, not checked).
	AdmitShare func(ctx context.Context, devices []Candidate) (ok []bool, why string)
}

// Validate reports what is wrong with o's durations, names, devices and
// need as Acquire, TryAcquire, Inspect and Clear would, touching nothing:
// a program checks its input with it before it starts other work. The
// error is an *OptionError. (The path is checked when it is used: see
// FolderError.)
func (o Options) Validate() error {
	_, err := o.withDurations()
	if err == nil {
		_, err = o.target()
	}
	return err
}

// OptionError is an option that cannot be used. Option names it as the
// gpuexec command does: poll, report, heartbeat, stale, owner, slug,
// devices, need, path.
type OptionError struct {
	Option  string
	Problem string // reads after the option's name: "must be at least 1ms, got 0s"
}

func (e *OptionError) Error() string { return "lock: invalid " + e.Option + ": " + e.Problem }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *OptionError) Unwrap() error { return ErrInvalid }

// Errors that callers tell apart with errors.Is.
var (
	// ErrInvalid is wrapped by errors about Options (see OptionError).
	ErrInvalid = errors.New("lock: invalid options")
	// ErrHeld says a live holder has the lock: from Clear without force,
	// and in the *WaitError of a TryAcquire that met contention.
	ErrHeld = errors.New("lock: held by a live holder")
	// ErrRefused is in the *WaitError of a TryAcquire that found the
	// locks it needs free but Options.Admit did not admit enough of them
	// (WaitError.Why says why).
	ErrRefused = errors.New("lock: free, but not admitted")
	// ErrNotLock is returned (wrapped in a *fs.PathError) when the file
	// at the lock path is neither a lock record nor a partly written or
	// damaged one: the lock path names some other file, which is never
	// cleared, overwritten or removed.
	ErrNotLock = errors.New("not a lock file")
	// ErrNotRegular is returned (wrapped in a *fs.PathError) when the
	// lock path is something other than a regular file: a folder, a
	// symbolic link, a FIFO, a device. Nothing follows, writes through or
	// removes such a path.
	ErrNotRegular = osfile.ErrNotRegular
	// ErrUnreachable is wrapped by errors of remote backends that could
	// not reach their service within its dial timeout.
	ErrUnreachable = errors.New("lock service unreachable")
	// ErrNoFolder is returned by Inspect (wrapped in a *fs.PathError
	// naming the folder) when the lock's folder does not exist: no lock
	// was ever taken at that path (or its folder was removed), which
	// more often means a mistyped path, or another TMPDIR than the jobs',
	// than a free GPU. Nothing is created to find it.
	ErrNoFolder = errors.New("lock: the lock's folder does not exist")
)

// WaitError says the lock was not had: Acquire's context ended first
// (Err is ctx's error: errors.Is(err, context.DeadlineExceeded) tells a
// deadline from a cancellation), or TryAcquire met contention (Err is
// ErrHeld). It carries the locks as last seen, so that nobody has to look
// again to say who was in the way.
type WaitError struct {
	// Seen are the locks waited for as last seen: the lock, or each
	// device in Options.Devices' order (Status.Device names it). A lock
	// left free but for earlier arrivals in the queue is StateFree.
	Seen []*Status
	// Waited is how long the caller waited.
	Waited time.Duration
	// Why is what Options.Admit last said kept free locks from being
	// taken; empty when they were held.
	Why string
	Err error
}

// Holder is the first lock seen that is not free (nil when none was).
func (e *WaitError) Holder() *Status {
	for _, st := range e.Seen {
		if st != nil && st.State != StateFree {
			return st
		}
	}
	return nil
}

// Holders names who was in the way, for messages: "channels/ep12 (pid
// 4242)", "another job" when the lock was free but earlier arrivals were
// queued for it, or for devices "GPU 0: channels/ep12 (pid 4242), GPU 1:
// free".
func (e *WaitError) Holders() string { return holders(e.Seen) }

func (e *WaitError) Error() string {
	switch {
	case errors.Is(e.Err, ErrHeld):
		return "lock: held by " + e.Holders()
	case errors.Is(e.Err, ErrRefused):
		return "lock: free but not admitted: waiting for " + e.Why
	case e.Why != "":
		return fmt.Sprintf("lock: gave up after %s: waiting for %s: %v", fmtAge(e.Waited), e.Why, e.Err)
	}
	return fmt.Sprintf("lock: gave up after %s: held by %s: %v", fmtAge(e.Waited), e.Holders(), e.Err)
}

func (e *WaitError) Unwrap() error { return e.Err }

// Acquire queues for the lock (or Need of the devices) until it holds it or
// ctx ends.
//
// Waiters are served first come, first served: on arrival Acquire takes a
// ticket beside the lock and does not take a free lock while a live waiter
// that arrived earlier is queued. It wakes within milliseconds when the
// lock is released or cleared (it watches the lock's folder), checks every
// 100 ms whether the holder's job is gone, and re-checks everything every
// Options.Poll in any case (the fallback where the folder cannot be
// watched, e.g. network shares). It clears stale locks (logging why) and
// logs the holder and its queue position every Options.Report. The
// returned lock is kept alive by a heartbeat until Release.
//
// When ctx ends first the error is a *WaitError and the ticket is gone;
// other errors (bad options, an unusable path, a lock path that is not a
// regular file or not a lock) end the wait at once.
func Acquire(ctx context.Context, o Options) (*Held, error) {
	o, t, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	h, err := queueFor(ctx, o, t)
	return h, explain(o.Path, err)
}

// TryAcquire takes the lock (or Need of the devices) if it is free or stale
// and no waiter is queued for it, without waiting. Contention is a
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
	pl := &place{q: newQueue(o.Path, t.paths), tryWait: clearGuardWait}
	h, seen, err := attemptAdmitted(context.Background(), o, t, pl)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, errGuardStuck(o.Path)
	case err != nil:
		return nil, explain(o.Path, err)
	case h == nil && pl.why != "":
		return nil, &WaitError{Seen: seen, Why: pl.why, Err: ErrRefused}
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

// Info is the content of a lock file.
//
// The first five fields are exactly the seed's (same JSON names and types),
// so files written by the seed's Node tool parse here and files written here
// parse there. The others are gpuexec's additions; they are omitted when
// empty and never required: a record without them is judged by pid and
// heartbeat alone.
type Info struct {
	PID        int    `json:"pid"`
	AcquiredAt string `json:"acquiredAt"`
	Owner      string `json:"owner"`
	Slug       string `json:"slug"`
	Token      string `json:"token"`

	// Host is the holder's host name. When it is set and differs from this
	// host, the pid cannot be checked and only the heartbeat counts.
	Host string `json:"host,omitempty"`
	// PIDStart is the holder process's start time in milliseconds since the
	// Unix epoch, so that a recycled pid is not mistaken for the holder.
	PIDStart int64 `json:"pidStart,omitempty"`
	// ChildPGID is the process group (Unix) of the job gpuexec runs. While
	// any process of that group lives, the lock is alive even if gpuexec
	// itself was killed.
	ChildPGID int `json:"childPgid,omitempty"`
	// ChildStart is when the job's first process, the leader of
	// ChildPGID, started, in ms since the epoch (as PIDStart). A group id
	// is a pid, reused once the group is gone: a group led by a process
	// started at another time is not the job's. With it, a live group
	// keeps the lock held however old its heartbeat (a record without it,
	// of an older gpuexec, only while its heartbeat is fresh).
	ChildStart int64 `json:"childStart,omitempty"`
	// Share marks a lock held in shared mode (Options.ShareMiB): the
	// record names one of its sharers, each of which has a sidecar
	// (see Status.Sharers). Readers that know nothing of it see a busy
	// device, as they should.
	Share bool `json:"share,omitempty"`
	// Cover marks the lock at a path held for the device locks beside it
	// (Options.Devices) while any of them is held: the record names one
	// of their holders, each of which shares its liveness lock. Readers
	// that know nothing of it (the seed's tool) see the machine busy, as
	// they should; a holder of the path itself waits until it is gone.
	Cover bool `json:"cover,omitempty"`
	// Deadline is when the holder's job is stopped at the latest (gpuexec
	// --timeout; see Options.HoldLimit), ISO-8601 UTC with milliseconds as
	// AcquiredAt; empty when it has none. Waiters show it. A record's
	// deadline that is not such a time is read as none, never as an
	// error.
	Deadline string `json:"deadline,omitempty"`
}

// State is what a lock file says about the lock.
type State string

// The states a lock can be in.
const (
	StateFree  State = "free"  // no lock file
	StateHeld  State = "held"  // a live holder, or a record still being written
	StateStale State = "stale" // the holder is gone or its heartbeat stopped
)

// Status is a lock file as read and judged at one instant. It may be out of
// date as soon as it is returned.
type Status struct {
	State State `json:"state"`
	// Path is the lock file's absolute path (an etcd lock's URL).
	Path string `json:"path"`
	// Device is the device whose lock this is, when it was asked for as
	// one of Options.Devices.
	Device string `json:"device,omitempty"`
	// Info is the parsed record; nil when the lock is free or its content
	// is not a valid record.
	Info *Info `json:"info,omitempty"`
	// Fields holds every top-level field of the record as read, unknown ones
	// included; nil when the content is not a JSON object.
	Fields map[string]any `json:"fields,omitempty"`
	// Content is the raw content (at most maxRecordSize bytes).
	Content []byte `json:"content,omitempty"`
	// ModTime is the file's mtime, i.e. the last heartbeat.
	ModTime time.Time `json:"modTime"`
	// HeartbeatAge is how long ago ModTime was, at the time of judging. It
	// is negative for an mtime in the future.
	HeartbeatAge time.Duration `json:"heartbeatAge"`
	// Alive reports whether the holder is taken to be alive (the lock is
	// held); false for free and stale locks.
	Alive bool `json:"alive"`
	// Reason says why the lock is judged as it is: why it is stale, or what
	// keeps an odd-looking lock alive. Empty for an ordinary live holder.
	Reason string `json:"reason,omitempty"`

	// Sharers are the live sharers of a lock held in shared mode
	// (Info.Share), with their budgets; nil otherwise.
	Sharers []Sharer `json:"sharers,omitempty"`

	// What the OS said, as Inspect or Clear returned a held lock, of its
	// holder and its job, on this host; left empty for a holder on
	// another host, and for a cover or shared record (whose holder is one
	// of several), and by every other function. Only what was verified
	// is told (see ProcState).
	//
	// HolderProcess is the holder's process (Info.PID): ProcGone while
	// the lock is held means that something else keeps it held (its
	// job's processes, see JobGroup); "" when its pid cannot be told
	// from another process (a record without Info.PIDStart, a start
	// time that cannot be read).
	HolderProcess ProcState `json:"holderProcess,omitempty"`
	// JobGroup is the process group of the holder's job (Unix), as the
	// record (Info.ChildPGID) or the holder's liveness file notes it;
	// 0 when none is noted with its leader's start time.
	JobGroup int `json:"jobGroup,omitempty"`
	// JobProcess is JobGroup's state: ProcRunning while a process of it
	// may run, ProcStopped when every one is stopped, ProcGone when none
	// is left; "" when JobGroup is 0.
	JobProcess ProcState `json:"jobProcess,omitempty"`
	// JobGroupDoubt, when set, says why JobGroup is not vouched for as
	// the holder's job: it runs as another user than the one who owns
	// the record that names it ("its record is uid 1001's but names
	// process group 8329, which runs as uid 0"). Anyone who may write in
	// the folder can name anyone's group there, as can a job that took
	// another uid (sudo): such a group is no process a caller should be
	// told to end as the job's. "" otherwise (and off Unix, where a
	// file's owner is not compared).
	JobGroupDoubt string `json:"jobGroupDoubt,omitempty"`

	// recordOwner is the uid that owns the lock file as read, when
	// ownerTold (not on Windows, nor for a Status not read from a file).
	recordOwner int
	ownerTold   bool

	// orphan is the locked liveness file of a holder whose record is
	// gone while its job still runs (see sweep); orphanGroup is the
	// job's process group it noted.
	orphan      string
	orphanGroup int
	// orphanRefused says why the note that keeps it held, in a file
	// nobody holds, is not its file owner's word (see keptStatus): held
	// only while that file is fresh, and clear --force removes it.
	orphanRefused string
	// keptBy are the process groups whose processes alone keep a lock
	// held whose holder is gone (see judge): what a waiter looks at
	// between tries.
	keptBy []int
	// keptChecked is when a waiter last looked at every process of
	// keptBy (see holderGone).
	keptChecked time.Time
}

// Waiter is one ticket in the queue, for status displays.
type Waiter struct {
	// Position is 1 for the next waiter to be served.
	Position int    `json:"position"`
	Seq      uint64 `json:"seq"`
	PID      int    `json:"pid"`
	Owner    string `json:"owner"`
	Slug     string `json:"slug"`
	Host     string `json:"host,omitempty"`
	// Since is when it started waiting (UTC ISO-8601 with milliseconds).
	Since string `json:"since"`
	// Locks are the lock files it waits for (base names); empty for a
	// ticket that does not say (it is taken to wait for every lock).
	Locks []string `json:"locks,omitempty"`
	// Alive is false for a ticket whose waiter is gone (not yet pruned).
	Alive bool `json:"alive"`
	// Process is what the OS says of a live waiter's process on this
	// host (ProcStopped: it keeps its place but takes nothing, and a
	// free lock idles until the waiters behind pass it); "" when its pid
	// cannot be told from another process (a ticket of an older gpuexec,
	// without the waiter's start time) or it waits on another host.
	Process ProcState `json:"process,omitempty"`
}

// ProcState is what the OS says of a process or a job's process group,
// verified against its start time (a pid read from the lock's folder may
// have been reused, or be anyone's). Off Linux, where a stopped process is
// not told, one that exists is ProcUnknown.
type ProcState string

// The states a holder's or waiter's process, or a job's group, is seen in.
const (
	ProcRunning ProcState = "running" // it may run (a group: some process of it)
	ProcStopped ProcState = "stopped" // stopped (Ctrl+Z, SIGSTOP, a debugger): it does nothing until continued
	ProcGone    ProcState = "gone"    // no such process (a group: none of it left)
	ProcUnknown ProcState = "unknown" // it exists; whether it is stopped is not told
)

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

// Report is what Inspect finds: each lock as judged and the queue.
type Report struct {
	// Path is the lock's path, absolute (with devices, the queue's).
	Path string `json:"path"`
	// Locks are the lock, or each device's in Options.Devices' order.
	Locks []*Status `json:"locks"`
	// Queue lists the waiters in arrival order, live and dead.
	Queue []Waiter `json:"queue"`
	// devices says that Locks are devices', for Describe and JSON.
	devices bool
}

// Inspect reads and judges the lock (or every device's) and lists its
// queue, for status displays; it changes nothing. A lock whose record is
// gone while its holder's job still runs (a forced clear) is held. A held
// lock's holder and job, and each live waiter, are told as the OS sees
// them (Status.HolderProcess, Status.JobProcess, Waiter.Process). A folder
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
	r := &Report{Path: o.Path, devices: t.names != nil}
	if r.Locks, err = inspectAll(o, t); err != nil {
		return nil, explain(o.Path, err)
	}
	for _, st := range r.Locks {
		observe(st, osProber{lockPath: st.Path})
	}
	if r.Queue, err = readQueue(o.Path, t.paths); err != nil {
		return nil, err
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
// removal here it renames the lock aside and re-reads it first, so a lock
// created in the meantime is never removed. Clear takes one lock: with
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
	o, err := o.resolved()
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

// Held is a held lock, or the devices one job holds (an ordinary lock on
// each). Its heartbeat keeps each lock file's mtime fresh until Release. Its
// methods are safe for concurrent use.
type Held struct {
	o       Options
	devices []string // the names held, nil for one lock
	locks   []*fileLock
	lost    *lost.Signal
	// What waiting left behind (a ticket, a watch), let go of beside the
	// job's start: see retire.
	retiring   func()
	retired    chan struct{} // closed once let go of; nil when nothing was left
	retireOnce sync.Once
	// cover is, for a device set, its part of the lock at Options.Path
	// while it holds devices beside it (see cover.go); nil otherwise.
	cover *fileLock
	// group is the job's process group as NoteChild or RecordChild
	// was told of it.
	groupMu sync.Mutex
	group   jobGroup
	// releasing is set by the first Release.
	releasing atomic.Bool
}

// Path is the lock file's absolute path (with devices, the queue's).
func (h *Held) Path() string { return h.o.Path }

// Devices are the names of the devices held, in Options.Devices' order;
// nil for a lock without devices.
func (h *Held) Devices() []string { return append([]string(nil), h.devices...) }

// Info is the record written into the lock file (with devices, the first
// device's: every record has the same pid, owner and slug, and a token of
// its own).
func (h *Held) Info() Info { return h.locks[0].record() }

// Tokens are the records' tokens, one per lock held (in Devices' order).
func (h *Held) Tokens() []string {
	out := make([]string, len(h.locks))
	for i, l := range h.locks {
		out[i] = l.record().Token
	}
	return out
}

// LiveFiles are the open liveness files whose kernel locks mark this holder
// alive: one per lock held, and for a sharer its sidecar too. Pass them to the processes that do the guarded
// work (exec.Cmd.ExtraFiles on Unix) and the locks stay alive, even if this
// process is killed, for as long as any of them runs. Do not close them.
func (h *Held) LiveFiles() []*os.File {
	var out []*os.File
	for _, l := range h.locks {
		out = append(out, l.live.f)
		if l.share != nil {
			out = append(out, l.share.f)
		}
	}
	if h.cover != nil {
		out = append(out, h.cover.live.f)
	}
	return out
}

// NoteUse records, for a sharer (Options.ShareMiB), the video memory its job
// was last measured using, and whether that is over its budget by more
// than the caller allows, in its sidecar, where status shows it. It does
// nothing for a holder that is not a sharer.
func (h *Held) NoteUse(usedMiB int64, over bool) error {
	var errs []error
	for _, l := range h.locks {
		if l.share != nil {
			errs = append(errs, l.noteShare(func(s *Sharer) { s.UsedMiB, s.Over = usedMiB, over }))
		}
	}
	return errors.Join(errs...)
}

// Lost is closed when a lock held was found to be no longer ours (removed,
// or replaced by another holder's); someone else may hold it from then on,
// and the caller should stop using what it guards.
func (h *Held) Lost() <-chan struct{} { return h.lost.Lost() }

// LostReason says why Lost was closed; nil while it is not.
func (h *Held) LostReason() error { return h.lost.Reason() }

// NoteChild notes the process group of the job run under the lock (pgid,
// the job's first process's pid), in each liveness file and, for a sharer,
// in its sidecar, so that the lock stays alive while that group runs even
// if this process is killed and the job's processes closed the files they
// inherited. The group's leader's start time goes with it, so that a group
// that later carries the same number is never taken for the job's. It is
// one write per lock, with no guard and no new file: call it the moment
// the job starts. It also lets go, in the background, of the queue ticket
// and the watch that Acquire waited with, which were kept until then so
// that the job's start did not wait for their removal. RecordChild puts the
// group into the records themselves, where status shows it.
func (h *Held) NoteChild(pgid int) error {
	g := h.jobGroup(pgid)
	var errs []error
	for _, l := range h.locks {
		if l.share != nil {
			errs = append(errs, l.noteSharer(g))
		} else {
			errs = append(errs, l.live.note(g))
		}
	}
	h.letGo()
	return errors.Join(errs...)
}

// RecordChild writes the process group of the job run under the lock into
// each record (childPgid, childStart), so that the lock stays alive while
// that group runs even if this process is killed. It also counts as a
// heartbeat.
func (h *Held) RecordChild(pgid int) error {
	g := h.jobGroup(pgid)
	var errs []error
	for _, l := range h.locks {
		errs = append(errs, l.recordChild(g))
	}
	if h.cover != nil {
		errs = append(errs, h.cover.recordChild(g))
	}
	return errors.Join(errs...)
}

// jobGroup is the job's group pgid with its leader's start time, read once
// per group.
func (h *Held) jobGroup(pgid int) jobGroup {
	h.groupMu.Lock()
	defer h.groupMu.Unlock()
	if h.group.id != pgid {
		h.group = jobGroup{id: pgid}
		h.group.since, _ = proc.Start(pgid)
	}
	return h.group
}

// logAcquired logs the acquired line: the lock, how long it was waited
// for, and the devices taken.
func (h *Held) logAcquired(waited time.Duration) {
	h.o.Logger.Info("acquired GPU lock", append(h.logFields(), "waited", fmtAge(waited))...)
}

// logFields name the lock held in its acquired and releasing lines: its
// path, and the devices taken.
func (h *Held) logFields() []any {
	f := []any{"path", h.o.Path}
	if h.devices != nil {
		f = append(f, "devices", strings.Join(h.devices, ","))
	}
	return f
}

// Release stops the heartbeat and removes each lock file that still holds
// this holder's pid and token; a lock that is no longer ours is left alone.
// It is safe to call more than once; later calls do nothing.
//
// The first call logs "releasing GPU lock" before it gives anything up, so
// that in a log several holders share, a holder's releasing line comes
// before the acquired line of the one it hands the lock to. A release
// that then fails says so in its error; a lock found to be no longer ours
// is logged as such.
func (h *Held) Release() error {
	if h.releasing.CompareAndSwap(false, true) {
		h.o.Logger.Info("releasing GPU lock", h.logFields()...)
	}
	var errs []error
	for _, l := range h.locks {
		errs = append(errs, l.release())
	}
	if h.cover != nil {
		// After the devices: the cover goes only once none beside it
		// is held.
		errs = append(errs, h.cover.release())
	}
	if h.retired != nil {
		h.letGo()
		<-h.retired
	}
	return errors.Join(errs...)
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

// Files is the lock-file backend: this package's functions.
var Files Backend = files{}

type files struct{}

// Check checks o as Validate does, and that the path names a lock file.
// The folder is checked when the lock is used (see FolderError), where the
// caller logs it.
func (files) Check(o Options) error {
	if err := checkPath(o.Path); err != nil {
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

// CheckPath reports what is wrong with path as a lock file's path, as
// every function of this package checks Options.Path, touching nothing:
// an *OptionError for "path" when it is empty, an etcd:// URL (the etcd
// backend's), or shaped like another URL or HOST:PORT (http://h:2379/k,
// etcd:/h/k, h:2379/k: a mistyped etcd URL; a local name with a colon is
// written ./h:2379/...). A caller that makes a path absolute checks it
// first: /cwd/http:/h:2379/k no longer looks like a URL.
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
