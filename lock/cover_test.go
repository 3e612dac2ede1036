package lock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// The plain lock stands for every GPU: it is not taken while a device's
// lock beside it is held, and no device's lock is taken while it is held,
// whichever is first; a waiter of either kind takes its lock as soon as the
// other's holder is gone.
func TestPlainAndDeviceLocksExcludeEachOther(t *testing.T) {
	for _, first := range []string{"device", "plain"} {
		t.Run(first+" first", func(t *testing.T) {
			plain := testOptions(t)
			dev := plain
			dev.Devices = []string{"0"}
			holdOpts, waitOpts := dev, plain
			if first == "plain" {
				holdOpts, waitOpts = plain, dev
			}
			h, err := Acquire(context.Background(), holdOpts)
			if err != nil {
				t.Fatal(err)
			}
			h2, err := TryAcquire(waitOpts)
			var werr *WaitError
			if !contended(h2, err) || !errors.As(err, &werr) {
				h.Release()
				t.Fatalf("TryAcquire of the %s lock while the %s one is held = %v, %v; want contention", map[bool]string{true: "device", false: "plain"}[first == "plain"], first, h2, err)
			}
			if who := werr.Holders(); !strings.Contains(who, "test/"+t.Name()) {
				t.Errorf("Holders = %q, want the holder named", who)
			}
			if first == "device" && !strings.Contains(werr.Holders(), "GPU 0: ") {
				t.Errorf("Holders = %q, want the device it holds", werr.Holders())
			}
			got := acquireAsync(t, waitOpts)
			testsupport.StillBlocked(t, 300*time.Millisecond, "the other kind of lock taken beside a holder", func() bool { return len(got) > 0 })
			if err := h.Release(); err != nil {
				t.Fatal(err)
			}
			select {
			case h2 := <-got:
				if h2 == nil {
					t.FailNow()
				}
				h2.Release()
			case <-time.After(20 * time.Second):
				t.Fatal("the waiter did not get the lock after the holder left")
			}
			if left := leftoversBeside(t, plain.Path); len(left) > 0 {
				t.Errorf("left beside the lock: %v", left)
			}
		})
	}
}

// Jobs on different devices run together under one cover, which names a
// live one of them until the last leaves; the seed's tool sees the machine
// busy all along, and nothing is left.
func TestCoverLastsWhileAnyDeviceIsHeld(t *testing.T) {
	o := testOptions(t)
	d0, d1 := o, o
	d0.Devices, d1.Devices = []string{"0"}, []string{"1"}
	h0, err := Acquire(context.Background(), d0)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := Acquire(context.Background(), d1)
	if err != nil {
		t.Fatal(err)
	}
	cover := func() *Info {
		info, err := parseRecord([]byte(mustRead(t, o.Path)))
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	c := cover()
	if !c.Cover || c.PID != os.Getpid() {
		t.Fatalf("cover %+v, want one naming this process", c)
	}
	if err := h0.Release(); err != nil {
		t.Fatal(err)
	}
	if after := cover(); after.Token != c.Token || !after.Cover {
		t.Fatalf("cover after one device left = %+v, want the same cover (token %s)", after, c.Token)
	}
	if h, err := TryAcquire(o); !contended(h, err) {
		t.Fatalf("plain TryAcquire while GPU 1 is held = %v, %v; want contention", h, err)
	}
	if err := h1.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(o.Path); !os.IsNotExist(err) {
		t.Fatalf("the cover outlived the last device holder: %v", err)
	}
	if left := leftoversBeside(t, o.Path); len(left) > 0 {
		t.Errorf("left beside the lock: %v", left)
	}
}

// A device's lock named by its own path is that device of the lock it is
// beside: it queues and excludes as --gpus N does, and its name must be one
// lock per card.
func TestDeviceLockByItsPath(t *testing.T) {
	o := testOptions(t)
	byPath := o
	byPath.Path = filepath.Join(filepath.Dir(o.Path), "gpu1.lock")
	h, err := Acquire(context.Background(), byPath)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if abs, _ := filepath.Abs(o.Path); h.Path() != abs || len(h.Devices()) != 1 || h.Devices()[0] != "1" {
		t.Fatalf("gpu1.lock held as %s, devices %v; want device 1 of %s", h.Path(), h.Devices(), abs)
	}
	if h2, err := TryAcquire(o); !contended(h2, err) {
		t.Fatalf("plain TryAcquire while gpu1.lock is held by its path = %v, %v; want contention", h2, err)
	}
	dev := o
	dev.Devices = []string{"1"}
	if h2, err := TryAcquire(dev); !contended(h2, err) {
		t.Fatalf("--gpus 1 while gpu1.lock is held by its path = %v, %v; want contention", h2, err)
	}
	for _, tt := range []struct {
		path, devices, want string
	}{
		{"gpu07.lock", "", "leading zero"},
		{"gpu1.lock", "0", "is GPU 1's lock"},
		{"box2.lock", "0", "is GPU 2's lock"},
	} {
		bad := o
		bad.Path = filepath.Join(filepath.Dir(o.Path), tt.path)
		if tt.devices != "" {
			bad.Devices = []string{tt.devices}
		}
		if err := bad.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%s, devices %q) = %v; want %q", tt.path, tt.devices, err, tt.want)
		}
	}
}

func TestDeviceNames(t *testing.T) {
	for _, tt := range []struct {
		list string
		want string // comma-separated, or the error's words
		ok   bool
	}{
		{"0,1,3", "0,1,3", true},
		{"07", "7", true},
		{" 00 , 12", "0,12", true},
		{"-1", "not a GPU index", false},
		{"GPU-8f2c5e7d", "a UUID", false},
		{"64", "at most 63", false},
		{"0,00", "twice", false},
		{"1x", "not a GPU index", false},
		{"0000000000000000000001", "without leading zeros", false},
	} {
		got, err := ParseDevices(tt.list, 0)
		switch {
		case tt.ok && (err != nil || strings.Join(got, ",") != tt.want):
			t.Errorf("ParseDevices(%q) = %v, %v; want %s", tt.list, got, err, tt.want)
		case !tt.ok && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("ParseDevices(%q) = %v, %v; want an error saying %q", tt.list, got, err, tt.want)
		}
	}
}

// Waiters for the plain lock and for devices are served in one order:
// neither passes the other (the plain lock needs every device).
func TestPlainAndDeviceWaitersKeepArrivalOrder(t *testing.T) {
	o := testOptions(t)
	dev := o
	dev.Devices = []string{"0"}
	h, err := Acquire(context.Background(), dev)
	if err != nil {
		t.Fatal(err)
	}
	plain := acquireAsync(t, o)
	waitUntil(t, "the plain waiter queued", func() bool { return liveWaiters(t, o.Path) == 1 })
	other := dev
	other.Devices = []string{"1"}
	second := acquireAsync(t, other)
	waitUntil(t, "the device waiter queued", func() bool { return liveWaiters(t, o.Path) == 2 })
	// GPU 1 is free, but the plain waiter came first and needs it.
	testsupport.StillBlocked(t, 300*time.Millisecond, "GPU 1 taken ahead of the plain waiter", func() bool { return len(second) > 0 })
	h.Release()
	p := <-plain
	if p == nil {
		t.FailNow()
	}
	testsupport.StillBlocked(t, 200*time.Millisecond, "GPU 1 taken beside the plain holder", func() bool { return len(second) > 0 })
	p.Release()
	if s := <-second; s != nil {
		s.Release()
	}
}

// leftoversBeside is leftovers, the devices' guards (permanent, as the
// lock's own) left out.
func leftoversBeside(t *testing.T, path string) []string {
	var odd []string
	for _, n := range leftovers(t, path) {
		if !strings.HasSuffix(n, guardSuffix) {
			odd = append(odd, n)
		}
	}
	return odd
}

// A device whose record was removed while its job still runs (a forced
// clear: its liveness file is still locked) keeps the plain lock from being
// taken, as it keeps the device's own.
func TestDeviceJobWithoutItsRecordKeepsThePlainLock(t *testing.T) {
	o := testOptions(t)
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	live, err := takeLive(filepath.Join(filepath.Dir(o.Path), "gpu2.lock"), "0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	h, err := TryAcquire(o)
	var werr *WaitError
	if !contended(h, err) || !errors.As(err, &werr) || !strings.Contains(werr.Holders(), "GPU 2: a job whose lock record was removed") {
		t.Fatalf("plain TryAcquire beside GPU 2's orphaned job = %v, %v; want contention naming it", h, err)
	}
	live.release()
	h, err = TryAcquire(o)
	if err != nil {
		t.Fatalf("plain TryAcquire once that job ended: %v", err)
	}
	h.Release()
}

// Names alone say which files are a device's lock beside a lock: its index
// between the lock's name and extension, and for the waker its liveness
// files too; and which paths name a device's lock (Canonical).
func TestDeviceLockNames(t *testing.T) {
	dir := filepath.FromSlash("/l")
	lock := filepath.Join(dir, "gpu.lock")
	for _, tt := range []struct {
		name   string
		beside bool
	}{
		{"gpu0.lock", true},
		{"gpu12.lock", true},
		{"gpu1.lock.live-0123456789abcdef", true},
		{"gpu.lock", false},
		{"gpu07.lock", false},
		{"gpu64.lock", false},
		{"gpu1.lock.ticket-00000000000000000001", false},
		{"gpu1.lock.guard", false},
		{"gpuA.lock", false},
		{"gpu1.lck", false},
		{"other1.lock", false},
	} {
		if got := besideLock(lock, filepath.Join(dir, tt.name)); got != tt.beside {
			t.Errorf("besideLock(%s, %s) = %v, want %v", lock, tt.name, got, tt.beside)
		}
	}
	if besideLock(lock, filepath.Join(dir, "sub", "gpu0.lock")) {
		t.Error("a device lock in another folder is beside the lock")
	}
	for _, tt := range []struct {
		path, lock, dev string
	}{
		{"/l/gpu1.lock", "/l/gpu.lock", "1"},
		{"/l/gpu12.lock", "/l/gpu.lock", "12"},
		{"/l/render-v2.lock", "/l/render-v.lock", "2"},
		{"/l/gpu3", "/l/gpu", "3"},
		{"/l/gpu.a1.lock", "/l/gpu.a.lock", "1"},
		{"/l/gpu.lock", "", ""},
		{"/l/gpu07.lock", "", ""},
		{"/l/gpu64.lock", "", ""},
		{"/l/7.lock", "", ""},
	} {
		lock, dev, ok := deviceLock(filepath.FromSlash(tt.path))
		if want := tt.dev != ""; ok != want || lock != filepath.FromSlash(tt.lock) || dev != tt.dev {
			t.Errorf("deviceLock(%s) = %s, %s, %v; want %s, %s", tt.path, lock, dev, ok, tt.lock, tt.dev)
		}
	}
}
