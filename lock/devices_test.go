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
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
	"github.com/gpuexec/gpuexec/internal/testlog"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

func TestDevicesBeside(t *testing.T) {
	tests := []struct {
		base  string
		names []string
		want  []string
	}{
		{"/tmp/gpuexec/gpu.lock", []string{"0", "1"}, []string{"/tmp/gpuexec/gpu0.lock", "/tmp/gpuexec/gpu1.lock"}},
		{"/locks/render", []string{"3"}, []string{"/locks/render3"}},
		{"/l/gpu.lock", []string{"12", "63"}, []string{"/l/gpu12.lock", "/l/gpu63.lock"}},
	}
	for _, tt := range tests {
		o := Options{Path: filepath.FromSlash(tt.base), Devices: tt.names}
		got, err := o.lockSet()
		if err != nil {
			t.Fatalf("target(%s, %v): %v", tt.base, tt.names, err)
		}
		if len(got.paths) != len(tt.want) || len(got.names) != len(tt.names) || got.need != 1 {
			t.Fatalf("target(%s, %v) = %+v, want %d lock files, need 1", tt.base, tt.names, got, len(tt.want))
		}
		for i, p := range got.paths {
			if got.names[i] != tt.names[i] || p != filepath.FromSlash(tt.want[i]) {
				t.Errorf("target(%s)[%d] = %s %s, want %s %s", tt.base, i, got.names[i], p, tt.names[i], tt.want[i])
			}
		}
	}
	// Without devices the lock is Path itself.
	got, err := Options{Path: filepath.FromSlash("/l/gpu.lock")}.lockSet()
	if err != nil || got.names != nil || len(got.paths) != 1 || got.paths[0] != filepath.FromSlash("/l/gpu.lock") || got.need != 1 {
		t.Fatalf("target without devices = %+v, %v", got, err)
	}
}

// devicePath is the lock file of device name beside o.Path.
func devicePath(o Options, name string) string {
	ext := filepath.Ext(o.Path)
	return strings.TrimSuffix(o.Path, ext) + name + ext
}

func TestAcquireDevicesRejectsBadSets(t *testing.T) {
	tooMany := make([]string, maxDevices+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprint(i)
	}
	tests := []struct {
		name    string
		devices []string
		need    int
		option  string // the OptionError's Option
	}{
		{"need several without devices", nil, 2, "need"},
		{"negative need", []string{"0", "1"}, -1, "need"},
		{"need more than there are", []string{"0", "1"}, 3, "need"},
		{"twice the same", []string{"0", "0"}, 1, "devices"},
		{"the same but for case", []string{"gpu-a", "GPU-A"}, 1, "devices"},
		{"elsewhere", []string{"../0"}, 1, "devices"},
		{"in a subfolder", []string{"x/0"}, 1, "devices"},
		{"another lock's sidecar", []string{"0.lock.live-x"}, 1, "devices"},
		{"the queue's own path", []string{""}, 1, "devices"},
		{"too many", tooMany, 1, "devices"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions(t)
			o.Devices, o.Need = tt.devices, tt.need
			check := func(what string, err error) {
				t.Helper()
				var oe *OptionError
				if !errors.Is(err, ErrInvalid) || !errors.As(err, &oe) || oe.Option != tt.option {
					t.Fatalf("%s = %v, want an OptionError for %s wrapping ErrInvalid", what, err, tt.option)
				}
			}
			h, err := Acquire(context.Background(), o)
			if h != nil {
				h.Release()
			}
			check("Acquire", err)
			h, err = TryAcquire(o)
			if h != nil {
				h.Release()
			}
			check("TryAcquire", err)
			_, err = Inspect(o)
			check("Inspect", err)
			check("Validate", o.Validate())
			if _, err := os.Stat(filepath.Dir(o.Path)); !os.IsNotExist(err) {
				t.Fatalf("refused options created the lock's folder: %v", err)
			}
		})
	}
}

// A held device set is an ordinary lock on each device: each device's lock
// file holds a record of its own, and Held, TryAcquire, Inspect and Clear
// name the devices.
func TestDevicesHeld(t *testing.T) {
	o := testOptions(t)
	o.Devices = []string{"0", "1"}
	o.Need = 2
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if got := h.Devices(); len(got) != 2 || got[0] != "0" || got[1] != "1" {
		t.Fatalf("Devices = %v, want [0 1]", got)
	}
	if abs, _ := filepath.Abs(o.Path); h.Path() != abs {
		t.Errorf("Path = %s, want the queue's %s", h.Path(), abs)
	}
	// A liveness file per device, and the cover's (see cover.go).
	tokens, lives := h.Tokens(), h.LiveFiles()
	if len(tokens) != 2 || tokens[0] == tokens[1] || len(lives) != 3 || lives[0] == nil || lives[1] == nil || lives[2] == nil {
		t.Fatalf("Tokens = %v, LiveFiles = %v; want one each per device and the cover's", tokens, lives)
	}
	for i, n := range o.Devices {
		info, err := parseRecord([]byte(mustRead(t, devicePath(o, n))))
		if err != nil || info.Token != tokens[i] || info.PID != os.Getpid() || info.Slug != t.Name() {
			t.Errorf("device %s's record %+v, %v; want token %s", n, info, err, tokens[i])
		}
	}
	if h.Info().Token != tokens[0] {
		t.Errorf("Info is %+v, want device 0's record", h.Info())
	}
	// The lock the devices are beside holds a cover while they are held,
	// so that a job for every GPU (and the seed's tool) waits.
	cover, err := parseRecord([]byte(mustRead(t, o.Path)))
	if err != nil || !cover.Cover || cover.Share || cover.PID != os.Getpid() || cover.Token == tokens[0] || cover.Token == tokens[1] {
		t.Fatalf("the lock beside the devices holds %+v, %v; want a cover naming this process, with a token of its own", cover, err)
	}

	oo := o
	oo.Need = 1
	h2, err := TryAcquire(oo)
	var werr *WaitError
	if !contended(h2, err) || !errors.As(err, &werr) {
		t.Fatalf("TryAcquire with every device held = %v, %v; want a WaitError wrapping ErrHeld", h2, err)
	}
	if len(werr.Seen) != 2 || werr.Seen[0].Device != "0" || werr.Seen[1].Device != "1" ||
		werr.Holder() == nil || werr.Holder().Info == nil || werr.Holder().Info.Token != tokens[0] ||
		!strings.Contains(werr.Holders(), "GPU 0: test/") || !strings.Contains(werr.Holders(), "GPU 1: test/") {
		t.Fatalf("WaitError saw %+v (%s), want both devices held by us", werr.Seen, werr.Holders())
	}

	r, err := Inspect(o)
	if err != nil || len(r.Locks) != 2 || r.Locks[0].Device != "0" || r.Locks[1].Device != "1" ||
		r.Locks[0].State != StateHeld || r.Locks[1].State != StateHeld {
		t.Fatalf("Inspect = %+v, %v", r, err)
	}
	for _, st := range r.Locks {
		if !strings.HasPrefix(st.Holder(), "test/") {
			t.Errorf("GPU %s held by %q, want by us", st.Device, st.Holder())
		}
	}
	if r.Beside != nil {
		t.Errorf("Inspect with devices has Beside %+v, want none", r.Beside)
	}
	// The plain lock beside them: its device locks in Beside.
	plain, err := Inspect(Options{Path: o.Path})
	if err != nil || len(plain.Locks) != 1 || plain.Locks[0].Device != "" || len(plain.Beside) != 2 ||
		plain.Beside[0].Device != "0" || plain.Beside[1].Device != "1" ||
		plain.Beside[0].State != StateHeld || plain.Beside[1].State != StateHeld {
		t.Fatalf("Inspect of the plain lock = %+v, %v; want both devices held beside it", plain, err)
	}
	if _, err := Clear(o, true); !errors.Is(err, ErrInvalid) {
		t.Errorf("Clear with devices = %v, want ErrInvalid: it takes one lock", err)
	}

	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	for _, n := range o.Devices {
		if _, err := os.Stat(devicePath(o, n)); !os.IsNotExist(err) {
			t.Errorf("device %s's lock still there after Release: %v", n, err)
		}
	}
	if _, err := os.Stat(o.Path); !os.IsNotExist(err) {
		t.Errorf("the cover is still there after Release: %v", err)
	}
	if left, _ := filepath.Glob(o.Path + ".live-*"); len(left) > 0 {
		t.Errorf("liveness files left after Release: %v", left)
	}
}

// TestDevicesContention: 16 contenders on 4 devices; each section proves it
// is alone on its devices with a kernel lock on a per-device truth file.
func TestDevicesContention(t *testing.T) {
	for _, need := range []int{1, 2} {
		t.Run(fmt.Sprint("need ", need), func(t *testing.T) {
			o := testOptions(t)
			o.Devices = []string{"0", "1", "2", "3"}
			o.Need = need
			truth := t.TempDir()
			// Every device can be held at once: 4/need jobs hold
			// together, on different devices covering them all.
			var holders []*Held
			names := map[string]bool{}
			for range len(o.Devices) / need {
				set, err := Acquire(context.Background(), o)
				if err != nil {
					t.Fatal(err)
				}
				holders = append(holders, set)
				for _, d := range set.Devices() {
					if names[d] {
						t.Fatalf("device %s given to two jobs at once", d)
					}
					names[d] = true
				}
			}
			if len(names) != len(o.Devices) {
				t.Fatalf("jobs holding together got %v, want every device", names)
			}
			for _, set := range holders {
				set.Release()
			}
			contenders, rounds := 16, 6
			if testing.Short() {
				contenders, rounds = 8, 3
			}
			var overlaps, sections atomic.Int64
			var wg sync.WaitGroup
			for c := range contenders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					oo := o
					oo.Slug = fmt.Sprint("c", c)
					for range rounds {
						set, err := Acquire(context.Background(), oo)
						if err != nil {
							t.Error(err)
							return
						}
						if len(set.Devices()) != need {
							t.Errorf("got %d devices, want %d", len(set.Devices()), need)
						}
						var files []*os.File
						for _, d := range set.Devices() {
							f, err := os.OpenFile(filepath.Join(truth, d), os.O_RDWR|os.O_CREATE, 0o644)
							if err != nil {
								t.Error(err)
								return
							}
							if ok, _ := osfile.TryLock(f); !ok {
								overlaps.Add(1)
							}
							files = append(files, f)
						}
						sections.Add(1)
						time.Sleep(200 * time.Microsecond)
						for _, f := range files {
							f.Close()
						}
						if err := set.Release(); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			if overlaps.Load() != 0 || sections.Load() != int64(contenders*rounds) {
				t.Fatalf("overlaps = %d, sections = %d of %d", overlaps.Load(), sections.Load(), contenders*rounds)
			}
			if odd := leftovers(t, o.Path); len(odd) > 0 {
				// Only the devices' guards may stay.
				for _, n := range odd {
					if filepath.Ext(n) != guardSuffix {
						t.Fatalf("left behind: %v", odd)
					}
				}
			}
		})
	}
}

// A stale lock on one device and a live holder on another do not stop a
// job from getting a device.
func TestDevicesDeadHolderDoesNotBlockOthers(t *testing.T) {
	o := testOptions(t)
	writeLock(t, devicePath(o, "0"), deadPID(t), "0123456789abcdef")
	od := o
	od.Path = devicePath(o, "1")
	h1, err := Acquire(context.Background(), od)
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o.Devices = []string{"0", "1"}
	set, err := Acquire(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if names := strings.Join(set.Devices(), ","); names != "0" {
		t.Fatalf("got device %s, want the one whose holder died", names)
	}
	set.Release()
}

// Waiters for a set of devices are served in arrival order, whichever
// device frees up: with two devices, the two oldest waiters hold them, and
// each release lets in the next oldest.
func TestDevicesFIFO(t *testing.T) {
	o := testOptions(t)
	o.Poll = time.Hour
	o.Devices = []string{"0", "1"}
	both := o
	both.Need = 2
	first, err := Acquire(context.Background(), both)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	got := make(chan int, n)
	release := make([]chan struct{}, n)
	var wg sync.WaitGroup
	for i := range n {
		release[i] = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			set, err := Acquire(context.Background(), o)
			if err != nil {
				t.Error(err)
				return
			}
			got <- i
			<-release[i]
			set.Release()
		}()
		waitUntil(t, "waiter to queue", func() bool { return liveWaiters(t, o.Path) == i+1 })
	}
	r, err := Inspect(Options{Path: o.Path, Devices: o.Devices})
	if err != nil || len(r.Locks) != 2 || r.Locks[0].State != StateHeld || r.Locks[0].Device != "0" ||
		r.Locks[1].State != StateHeld || r.Locks[1].Device != "1" || len(r.Queue) != n {
		t.Fatalf("Inspect = %+v, %v", r, err)
	}
	first.Release()
	holding := map[int]bool{<-got: true, <-got: true}
	if !holding[0] || !holding[1] {
		t.Fatalf("first holders %v, want waiters 0 and 1", holding)
	}
	for next := 2; next < n; next++ {
		close(release[next-2])
		if w := <-got; w != next {
			t.Fatalf("after waiter %d left, waiter %d got a device, want %d", next-2, w, next)
		}
	}
	close(release[n-2])
	close(release[n-1])
	wg.Wait()
	if _, err := os.Stat(o.Path); !os.IsNotExist(err) {
		t.Fatal("the cover was left behind")
	}
}

// Device guards are taken in one order for everyone, whatever the order of
// the list and whichever queue names them.
func TestDeviceGuardOrder(t *testing.T) {
	for _, paths := range [][]string{
		{"/l/gpu1.lock", "/l/gpu0.lock"},
		{"/l/gpu0.lock", "/l/gpu1.lock"},
		{"/l/gpuB.lock", "/l/gpua.lock", "/l/gpuA.lock"},
	} {
		var got []string
		for _, i := range (lockSet{paths: paths}).guardOrder() {
			got = append(got, paths[i])
		}
		for i := 1; i < len(got); i++ {
			if a, b := strings.ToLower(got[i-1]), strings.ToLower(got[i]); a > b || a == b && got[i-1] > got[i] {
				t.Errorf("guard order of %v: %v", paths, got)
			}
		}
	}
}

// Two waiters naming the same devices in opposite orders (each taking
// both) never hold a device's guard each and wait for the other's.
func TestDevicesInOppositeOrdersDoNotDeadlock(t *testing.T) {
	dir := t.TempDir()
	a := testOptions(t)
	a.Path, a.Devices = filepath.Join(dir, "gpu.lock"), []string{"0", "1"}
	b := testOptions(t)
	b.Path, b.Devices = filepath.Join(dir, "gpu.lock"), []string{"1", "0"}
	rounds := 200
	if testing.Short() {
		rounds = 40
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, o := range []Options{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				h, err := Acquire(ctx, o)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("%s: %w", filepath.Base(o.Path), err)
					return
				}
				h.Release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A stop (Ctrl+Z) that comes while a device set waits for a device's guard
// under the queue's guard lets the set go on and then stops the process:
// neither waits for the other, and the queue's guard is not kept.
func TestSuspendWhileWaitingForADeviceGuard(t *testing.T) {
	o := testOptions(t)
	o.Devices = []string{"0"}
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	// Another process's hold on device 0's guard (not counted here).
	f, _, err := osfile.OpenGuard(devicePath(o, "0") + guardSuffix)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ok, err := osfile.TryLock(f); !ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	tried := make(chan error, 1)
	go func() {
		h, err := TryAcquire(o)
		if h != nil {
			h.Release()
		}
		tried <- err
	}()
	// TryAcquire holds the queue's guard (counted: the suspend must wait
	// for it) and waits for the device's.
	testsupport.Await(t, 10*time.Second, "TryAcquire to hold the queue's guard", func() bool {
		guards.mu.Lock()
		defer guards.mu.Unlock()
		return guards.held == 1
	})
	var stopped atomic.Bool
	suspended := make(chan struct{})
	go func() {
		Suspend(func() { stopped.Store(true) })
		close(suspended)
	}()
	testsupport.StillBlocked(t, 100*time.Millisecond, "the suspend, while the queue's guard is held", stopped.Load)
	osfile.Unlock(f)
	select {
	case err := <-tried:
		if err != nil {
			t.Errorf("TryAcquire: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("TryAcquire never took the device's guard: it waits for the suspend, which waits for it")
	}
	select {
	case <-suspended:
	case <-time.After(20 * time.Second):
		t.Fatal("the suspend never came")
	}
}

// Each device of a set that is lost says so in the log; Lost closes once.
func TestEveryLostDeviceIsLogged(t *testing.T) {
	var logs testlog.Buffer
	o := testOptions(t)
	o.Devices, o.Need, o.Logger = []string{"0", "1"}, 2, testlog.Logger(&logs)
	h, err := TryAcquire(o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	for _, d := range o.Devices {
		if err := os.Remove(devicePath(o, d)); err != nil {
			t.Fatal(err)
		}
	}
	testsupport.Await(t, 10*time.Second, "both losses logged", func() bool {
		return strings.Count(logs.String(), "GPU lock lost") == 2
	})
	select {
	case <-h.Lost():
	default:
		t.Fatal("Lost not closed")
	}
}

// A heartbeat waiting for its guard is stopped at once, even where the one
// stopping it holds that guard (a device set rolled back under its
// guards): it does not wait out clearGuardWait.
func TestStopHeartbeatDoesNotWaitForTheGuard(t *testing.T) {
	o := testOptions(t)
	o.Heartbeat, o.Stale = time.Millisecond, time.Hour
	h, err := TryAcquire(o)
	if err != nil {
		t.Fatal(err)
	}
	g, err := takeGuard(context.Background(), o.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.release()
	l := h.locks[0]
	stopped := make(chan bool, 1)
	go func() { stopped <- l.stopHeartbeat() }()
	select {
	case <-stopped:
	case <-time.After(clearGuardWait / 2):
		t.Fatalf("stopHeartbeat waited for the guard (%s and more)", clearGuardWait/2)
	}
	l.removeGuarded()
}
