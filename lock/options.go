package lock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/safepath"
)

// Options are checked here, once, for every entry point: withDefaults
// fills in defaults, makes the path safe (see safeLockPath) and works out
// the lock set.

// lockSet is what a caller takes: the lock files it may take (the lock at
// Options.Path alone, or one per device beside it) and how many it needs.
type lockSet struct {
	names []string // device names; nil for a single lock
	paths []string // lock files, in names' order
	need  int
}

// checked are the paths whose content must be a lock or nothing before a
// ticket or guard is made beside queuePath: queuePath and every lock file.
func (t lockSet) checked(queuePath string) []string {
	if t.names == nil {
		return t.paths
	}
	return append([]string{queuePath}, t.paths...)
}

// guardOrder is the order in which the paths' guards are taken: by path,
// ignoring case, then as written.
func (t lockSet) guardOrder() []int {
	order := make([]int, len(t.paths))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		pa, pb := t.paths[a], t.paths[b]
		if c := strings.Compare(strings.ToLower(pa), strings.ToLower(pb)); c != 0 {
			return c
		}
		return strings.Compare(pa, pb)
	})
	return order
}

// withDefaults checks o, fills in the defaults, makes the path safe (see
// safeLockPath), and works out the lock set.
func (o Options) withDefaults() (Options, lockSet, error) {
	o, err := o.withSafePath()
	if err != nil {
		return o, lockSet{}, err
	}
	o = o.Canonical()
	t, err := o.lockSet()
	return o, t, err
}

// withSafePath is o with its path checked (see checkFilePath) and made
// safe (see safeLockPath), and its durations and names checked and
// defaulted, its path's lock file as named (Clear's: a device's lock is
// cleared by its own path).
func (o Options) withSafePath() (Options, error) {
	if err := checkFilePath(o.Path); err != nil {
		return o, err
	}
	o, err := o.withDurations()
	if err != nil {
		return o, err
	}
	abs, err := safeLockPath(o.Path)
	if err != nil {
		return o, err
	}
	o.Path = abs
	return o, nil
}

// checkPath refuses a path that names no lock file: empty.
func checkPath(path string) error {
	if path == "" {
		return &OptionError{Option: "path", Problem: "must not be empty"}
	}
	return nil
}

// checkFilePath refuses, beside what checkPath refuses, a path that starts
// like a URL, SCHEME:// (see urlScheme): another backend's lock, which
// taken for a file would be folders of this machine (etcd://h:2379/k
// would be ./etcd:/h:2379/k, the // made one /), a lock that no other
// machine sees where one they share was meant. Which backend a URL is,
// lock does not know.
func checkFilePath(path string) error {
	if err := checkPath(path); err != nil {
		return err
	}
	if scheme, ok := urlScheme(path); ok {
		return &OptionError{Option: "path", Problem: fmt.Sprintf("%q starts %s://, as a URL does, not a lock file's path: "+
			"a URL names another backend's lock; for a file or folder here whose name has a colon, put ./ before it", path, scheme)}
	}
	return nil
}

// urlScheme is the scheme of a path that starts as a URL does: SCHEME://,
// with a scheme as RFC 3986 writes it (a letter, then letters, digits, +,
// - or .) of two characters or more, so that a Windows drive (C://gpu.lock)
// is a path.
func urlScheme(path string) (string, bool) {
	scheme, _, ok := strings.Cut(path, "://")
	if !ok || len(scheme) < 2 {
		return "", false
	}
	for i := 0; i < len(scheme); i++ {
		c := scheme[i]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (i == 0 || !('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", false
		}
	}
	return scheme, true
}

// withDurations checks the durations and names and fills in the defaults.
func (o Options) withDurations() (Options, error) {
	def := func(d *time.Duration, v time.Duration, name string) error {
		switch {
		case *d == 0:
			*d = v
		case *d < MinInterval:
			return &OptionError{Option: name, Problem: fmt.Sprintf("must be at least %s, got %s", MinInterval, *d)}
		}
		return nil
	}
	// The heartbeat's default follows from Stale's, taken first; the
	// first problem is said in the order gpuexec lists its flags.
	staleErr := def(&o.Stale, DefaultStale, "stale")
	if err := errors.Join(
		def(&o.Poll, DefaultPoll, "poll"),
		def(&o.Report, DefaultReport, "report"),
		def(&o.Heartbeat, min(DefaultHeartbeat, o.Stale/3), "heartbeat"),
		staleErr,
	); err != nil {
		var first *OptionError
		errors.As(err, &first)
		return o, first
	}
	if o.Heartbeat < MinInterval {
		return o, &OptionError{Option: "stale", Problem: fmt.Sprintf("(%s) leaves a heartbeat under %s", o.Stale, MinInterval)}
	}
	if o.Heartbeat >= o.Stale {
		return o, &OptionError{Option: "heartbeat", Problem: fmt.Sprintf("(%s) must be shorter than stale (%s), or a live holder would look stale", o.Heartbeat, o.Stale)}
	}
	for _, n := range []struct{ name, v string }{{"owner", o.Owner}, {"slug", o.Slug}} {
		if err := checkName(n.v); err != nil {
			return o, &OptionError{Option: n.name, Problem: err.Error() + "; give a short plain name"}
		}
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return o, nil
}

// lockSet checks Devices and Need and names the lock files: Path alone, or
// one per device beside it, the device's name before Path's extension.
func (o Options) lockSet() (lockSet, error) {
	need := o.Need
	if need == 0 {
		need = 1
	}
	if len(o.Devices) == 0 {
		if need != 1 {
			return lockSet{}, &OptionError{Option: "need", Problem: fmt.Sprintf("must be 1 without devices, got %d", o.Need)}
		}
		if dev, ok := misspelledDevice(o.Path); ok {
			return lockSet{}, &OptionError{Option: "path", Problem: fmt.Sprintf("%s names GPU %s with a leading zero, which would be a lock of its own beside GPU %s's; name it without", filepath.Base(o.Path), dev, dev)}
		}
		return lockSet{paths: []string{o.Path}, need: 1}, nil
	}
	if err := checkDevices(o.Devices); err != nil {
		return lockSet{}, err
	}
	if _, dev, ok := deviceLock(o.Path); ok {
		return lockSet{}, &OptionError{Option: "path", Problem: fmt.Sprintf("%s is GPU %s's lock; with devices, name the lock they are beside", filepath.Base(o.Path), dev)}
	}
	if _, stem, _ := deviceName(o.Path); stem != "" && allDigits(stem[len(stem)-1:]) {
		return lockSet{}, &OptionError{Option: "path", Problem: fmt.Sprintf("%s ends in a digit, so its devices' locks (%s) would read as other GPUs' locks; with devices, name a lock without one", filepath.Base(o.Path), filepath.Base(deviceFile(o.Path, "1")))}
	}
	if need < 1 || need > len(o.Devices) {
		return lockSet{}, &OptionError{Option: "need", Problem: fmt.Sprintf("must be between 1 and the number of devices (%d), got %d", len(o.Devices), o.Need)}
	}
	t := lockSet{names: append([]string(nil), o.Devices...), need: need}
	for _, n := range o.Devices {
		t.paths = append(t.paths, deviceFile(o.Path, n))
	}
	return t, nil
}

// Canonical is o with a Path that names a device's lock, and no Devices,
// made the lock it is beside with that one device: a name that ends in a
// device's index (0 to 63, no leading zeros) before its extension, after a
// name that does not end in a digit. gpu1.lock is GPU 1 of gpu.lock,
// queued for with every other job of that lock and excluded as its GPU 1
// (see Options.Devices). Other Options are returned as they are. Acquire,
// TryAcquire and Inspect take Options so; Clear takes a device's lock by
// its own path.
func (o Options) Canonical() Options {
	if len(o.Devices) > 0 {
		return o
	}
	if beside, dev, ok := deviceLock(o.Path); ok {
		o.Path, o.Devices = beside, []string{dev}
	}
	return o
}

// safeLockPath makes a lock path absolute, its folder resolved to one that no
// other user can redirect (see package safepath): the lock's files are
// then found and made there by name, and nowhere else, for as long as the
// process runs. A folder another user could move away or point elsewhere
// is refused with a *FolderError.
func safeLockPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", &OptionError{Option: "path", Problem: fmt.Sprintf("%q: %v", path, err)}
	}
	dir, err := safepath.Dir(filepath.Dir(abs), 0, false)
	if err != nil {
		return "", &FolderError{Dir: filepath.Dir(abs), Err: err}
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}

// makeFolder creates the lock's folder dir (made safe: see safeLockPath), 0700
// (its files are then this user's alone, whatever group they are in; a
// folder to share is made by hand), and the folders above it that are
// missing, 0755 as the umask has it, each only where no other user could
// move it away. A folder that is there was
// checked when the path was resolved, and nobody else can change it.
func makeFolder(dir string) error {
	if fi, err := os.Lstat(dir); err == nil && fi.IsDir() {
		return nil
	}
	if _, err := safepath.Dir(dir, 0o700, false); err != nil {
		var se *safepath.Error
		if errors.As(err, &se) {
			return &FolderError{Dir: dir, Err: err}
		}
		return err
	}
	return nil
}

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
	// timeout and its grace before SIGKILL): the record, and a sharer's
	// sidecar, then say when that ends (Info.Deadline, Sharer.Deadline);
	// waiters show it, and sharers that backfill count on it. 0 (or less)
	// records none. Nothing here enforces it: the caller must.
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
	// ShareReserve is, for a sharer, the memory (MiB) its AdmitShare
	// keeps free on a device beside the budgets (0: its default). It is
	// written in its queue ticket, so that a sharer behind that would
	// start ahead of it works out its start as it will (Ahead.Reserve).
	ShareReserve int64
	// Backfill lets a sharer (ShareMiB, AdmitShare) with a HoldLimit
	// join a shared lock ahead of the waiters before it, when every one
	// of them waits for that one lock: AdmitShare is then asked with
	// Candidate.Ahead, and must admit only a sharer that ends before the
	// head of the queue could start (see Ahead.Passes). The caller
	// promises to stop its job within HoldLimit of the start (gpuexec's
	// --timeout and --kill-after do); the waiters passed keep their
	// places. Without it, or without a HoldLimit, a sharer only ever
	// starts at its turn.
	Backfill bool
}

// Validate reports what is wrong with o's durations, names, devices and
// need as Acquire, TryAcquire, Inspect and Clear would, touching nothing:
// a program checks its input with it before it starts other work. The
// error is an *OptionError. (The path is checked when it is used: see
// FolderError.)
func (o Options) Validate() error {
	_, err := o.withDurations()
	if err == nil {
		_, err = o.lockSet()
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
