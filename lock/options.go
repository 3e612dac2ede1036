package lock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/etcdurl"
	"github.com/gpuexec/gpuexec/internal/safepath"
)

// Options are checked here, once, for every entry point: withDefaults
// fills in defaults, resolves the path and works out the target.

// target is what a caller takes: the lock files it may take (the lock at
// Options.Path alone, or one per device beside it) and how many it needs.
type target struct {
	names []string // device names; nil for a single lock
	paths []string // lock files, in names' order
	need  int
}

// checked are the paths whose content must be a lock or nothing before a
// ticket or guard is made beside anchor: anchor and every lock file.
func (t target) checked(anchor string) []string {
	if t.names == nil {
		return t.paths
	}
	return append([]string{anchor}, t.paths...)
}

// guardOrder is the order in which the paths' guards are taken: by path,
// ignoring case, then as written.
func (t target) guardOrder() []int {
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

// maxDevices bounds Options.Devices: the largest machines hold 16 GPUs;
// each device is a lock file and a guard, checked at every try.
const maxDevices = 64

// maxDeviceName bounds a device's name: a GPU UUID is 40 characters.
const maxDeviceName = 128

// withDefaults checks o, fills in the defaults and resolves the path (see
// resolve), and works out the target.
func (o Options) withDefaults() (Options, target, error) {
	o, err := o.resolved()
	if err != nil {
		return o, target{}, err
	}
	o = o.Canonical()
	t, err := o.target()
	return o, t, err
}

// resolved is o with its path checked and resolved and its durations and
// names checked and defaulted, its path's lock file as named (Clear's: a
// device's lock is cleared by its own path).
func (o Options) resolved() (Options, error) {
	if err := checkPath(o.Path); err != nil {
		return o, err
	}
	o, err := o.withDurations()
	if err != nil {
		return o, err
	}
	abs, err := resolve(o.Path)
	if err != nil {
		return o, err
	}
	o.Path = abs
	return o, nil
}

// checkPath refuses a path that names no lock file: empty, an etcd:// URL,
// or shaped like another URL or HOST:PORT (see etcdurl.LooksLikeURL),
// which would be a file of this machine where a lock shared by several was
// meant.
func checkPath(path string) error {
	if path == "" {
		return &OptionError{Option: "path", Problem: "must not be empty"}
	}
	if etcdurl.Is(path) {
		return &OptionError{Option: "path", Problem: path + " names an etcd lock, not a lock file; use an etcd backend"}
	}
	if etcdurl.LooksLikeURL(path) {
		return &OptionError{Option: "path", Problem: fmt.Sprintf("%q is shaped like a URL or HOST:PORT, not a lock file's path: "+
			"an etcd lock is %sHOST:PORT/KEY; for a file or folder here whose name has a colon, put ./ before it", path, etcdurl.Scheme)}
	}
	return nil
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
	if err := errors.Join(
		def(&o.Poll, DefaultPoll, "poll"),
		def(&o.Report, DefaultReport, "report"),
		def(&o.Stale, DefaultStale, "stale"),
		def(&o.Heartbeat, min(DefaultHeartbeat, o.Stale/3), "heartbeat"),
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

// target checks Devices and Need and names the lock files: Path alone, or
// one per device beside it, the device's name before Path's extension.
func (o Options) target() (target, error) {
	need := o.Need
	if need == 0 {
		need = 1
	}
	if len(o.Devices) == 0 {
		if need != 1 {
			return target{}, &OptionError{Option: "need", Problem: fmt.Sprintf("must be 1 without devices, got %d", o.Need)}
		}
		if dev, ok := misspelledDevice(o.Path); ok {
			return target{}, &OptionError{Option: "path", Problem: fmt.Sprintf("%s names GPU %s with a leading zero, which would be a lock of its own beside GPU %s's; name it without", filepath.Base(o.Path), dev, dev)}
		}
		return target{paths: []string{o.Path}, need: 1}, nil
	}
	if err := checkDevices(o.Devices); err != nil {
		return target{}, err
	}
	if _, dev, ok := deviceLock(o.Path); ok {
		return target{}, &OptionError{Option: "path", Problem: fmt.Sprintf("%s is GPU %s's lock; with devices, name the lock they are beside", filepath.Base(o.Path), dev)}
	}
	if _, stem, _ := deviceName(o.Path); stem != "" && allDigits(stem[len(stem)-1:]) {
		return target{}, &OptionError{Option: "path", Problem: fmt.Sprintf("%s ends in a digit, so its devices' locks (%s) would read as other GPUs' locks; with devices, name a lock without one", filepath.Base(o.Path), filepath.Base(deviceFile(o.Path, "1")))}
	}
	if need < 1 || need > len(o.Devices) {
		return target{}, &OptionError{Option: "need", Problem: fmt.Sprintf("must be between 1 and the number of devices (%d), got %d", len(o.Devices), o.Need)}
	}
	t := target{names: append([]string(nil), o.Devices...), need: need}
	for _, n := range o.Devices {
		t.paths = append(t.paths, deviceFile(o.Path, n))
	}
	return t, nil
}

// deviceFile is the lock file of device n beside the lock at path.
func deviceFile(path, n string) string {
	dir, stem, ext := deviceName(path)
	return filepath.Join(dir, stem+n+ext)
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
	if anchor, dev, ok := deviceLock(o.Path); ok {
		o.Path, o.Devices = anchor, []string{dev}
	}
	return o
}

// deviceName splits a lock path into what names its devices' lock files:
// the folder, and the name's stem and extension between which a device's
// name goes (gpu.lock → gpu0.lock).
func deviceName(path string) (dir, stem, ext string) {
	dir, file := filepath.Split(path)
	ext = filepath.Ext(file)
	return dir, strings.TrimSuffix(file, ext), ext
}

// checkDevices checks a device list: 1 to maxDevices names, each a device
// index (see validIndex), none twice.
func checkDevices(names []string) error {
	if len(names) > maxDevices {
		return &OptionError{Option: "devices", Problem: fmt.Sprintf("names %d devices: at most %d", len(names), maxDevices)}
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if !validIndex(n) {
			return &OptionError{Option: "devices", Problem: notIndex(n)}
		}
		if seen[n] {
			return &OptionError{Option: "devices", Problem: fmt.Sprintf("names device %s twice", n)}
		}
		seen[n] = true
	}
	return nil
}

// notIndex says why n names no device's lock.
func notIndex(n string) string {
	switch {
	case allDigits(n) && len(n) > 1 && n[0] == '0':
		return fmt.Sprintf("names %q: write the index without leading zeros (%s), one lock per card", n, strings.TrimLeft(n[:len(n)-1], "0")+n[len(n)-1:])
	case allDigits(n):
		return fmt.Sprintf("names device %s: an index is at most %d", n, maxIndex)
	case strings.HasPrefix(strings.ToUpper(n), "GPU-") || strings.HasPrefix(strings.ToUpper(n), "MIG-"):
		return fmt.Sprintf("names %q, a UUID: a device's lock is named by its index (nvidia-smi's), so that one card is one lock", printable(SafeName(n)))
	}
	return fmt.Sprintf("names %q, which is not a GPU index (0, 1, 2, ...)", printable(SafeName(n)))
}

func parseDevices(list string, count int) ([]string, error) {
	if list == "all" {
		if count < 1 {
			return nil, &OptionError{Option: "devices", Problem: "all needs a device count of at least 1"}
		}
		if count > maxDevices {
			return nil, &OptionError{Option: "devices", Problem: fmt.Sprintf("all means %d devices: at most %d", count, maxDevices)}
		}
		names := make([]string, count)
		for i := range names {
			names[i] = strconv.Itoa(i)
		}
		return names, nil
	}
	if k := strings.Count(list, ",") + 1; k > maxDevices {
		return nil, &OptionError{Option: "devices", Problem: fmt.Sprintf("names %d devices: at most %d", k, maxDevices)}
	}
	names := strings.Split(list, ",")
	for i, n := range names {
		n = strings.TrimSpace(n)
		// 07 is 7: one card, one lock.
		if allDigits(n) && len(n) <= 3 {
			k, _ := strconv.Atoi(n)
			n = strconv.Itoa(k)
		}
		names[i] = n
	}
	return names, checkDevices(names)
}

// resolve makes a lock path absolute, its folder resolved to one that no
// other user can redirect (see package safepath): the lock's files are
// then found and made there by name, and nowhere else, for as long as the
// process runs. A folder another user could move away or point elsewhere
// is refused with a *FolderError.
func resolve(path string) (string, error) {
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

// makeFolder creates the lock's folder dir (resolved, see resolve), 0700
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
