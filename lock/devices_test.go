package lock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/lock/internal/osfile"
)

func TestDevicesBeside(t *testing.T) {
	tests := []struct {
		base  string
		names []string
		want  []string
	}{
		{"/tmp/gpuexec/gpu.lock", []string{"0", "1"}, []string{"/tmp/gpuexec/gpu0.lock", "/tmp/gpuexec/gpu1.lock"}},
		{"/locks/render", []string{"3"}, []string{"/locks/render3"}},
		{"/l/gpu.lock", []string{"GPU-8f2c"}, []string{"/l/gpuGPU-8f2c.lock"}},
	}
	for _, tt := range tests {
		got := DevicesBeside(filepath.FromSlash(tt.base), tt.names)
		for i, d := range got {
			if d.Name != tt.names[i] || d.Path != filepath.FromSlash(tt.want[i]) {
				t.Errorf("DevicesBeside(%s)[%d] = %+v, want %s", tt.base, i, d, tt.want[i])
			}
		}
	}
}

func TestAcquireDevicesRejectsBadSets(t *testing.T) {
	o := testOptions(t)
	devs := DevicesBeside(o.Path, []string{"0", "1"})
	tests := []struct {
		name    string
		devices []Device
		need    int
	}{
		{"none", nil, 1},
		{"need zero", devs, 0},
		{"need more than there are", devs, 3},
		{"twice the same", []Device{devs[0], devs[0]}, 1},
		{"elsewhere", []Device{{Name: "0", Path: filepath.Join(t.TempDir(), "gpu0.lock")}}, 1},
		{"the queue's own path", []Device{{Name: "0", Path: o.Path}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := AcquireDevices(context.Background(), o, tt.devices, tt.need); !errors.Is(err, ErrBadDevices) {
				t.Fatalf("AcquireDevices = %v, want ErrBadDevices", err)
			}
		})
	}
}

// TestDevicesContention: 16 contenders on 4 devices; each section proves it
// is alone on its devices with a kernel lock on a per-device truth file.
func TestDevicesContention(t *testing.T) {
	for _, need := range []int{1, 2} {
		t.Run(fmt.Sprint("need ", need), func(t *testing.T) {
			o := testOptions(t)
			devs := DevicesBeside(o.Path, []string{"0", "1", "2", "3"})
			truth := t.TempDir()
			// Every device can be held at once: 4/need jobs hold
			// together, on different devices covering them all.
			var holders []*DeviceSet
			names := map[string]bool{}
			for range len(devs) / need {
				set, err := AcquireDevices(context.Background(), o, devs, need)
				if err != nil {
					t.Fatal(err)
				}
				holders = append(holders, set)
				for _, d := range set.Devices() {
					if names[d.Name] {
						t.Fatalf("device %s given to two jobs at once", d.Name)
					}
					names[d.Name] = true
				}
			}
			if len(names) != len(devs) {
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
						set, err := AcquireDevices(context.Background(), oo, devs, need)
						if err != nil {
							t.Error(err)
							return
						}
						if len(set.Devices()) != need {
							t.Errorf("got %d devices, want %d", len(set.Devices()), need)
						}
						var files []*os.File
						for _, d := range set.Devices() {
							f, err := os.OpenFile(filepath.Join(truth, d.Name), os.O_RDWR|os.O_CREATE, 0o644)
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
					if filepath.Ext(n) != GuardSuffix {
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
	devs := DevicesBeside(o.Path, []string{"0", "1"})
	writeLock(t, devs[0].Path, deadPID(t), "0123456789abcdef")
	od := o
	od.Path = devs[1].Path
	h1, err := Acquire(context.Background(), od)
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	set, err := AcquireDevices(ctx, o, devs, 1)
	if err != nil {
		t.Fatal(err)
	}
	if set.Names() != "0" {
		t.Fatalf("got device %s, want the one whose holder died", set.Names())
	}
	set.Release()
}

// Waiters for a set of devices are served in arrival order, whichever
// device frees up: with two devices, the two oldest waiters hold them, and
// each release lets in the next oldest.
func TestDevicesFIFO(t *testing.T) {
	o := testOptions(t)
	o.Poll = time.Hour
	devs := DevicesBeside(o.Path, []string{"0", "1"})
	first, err := AcquireDevices(context.Background(), o, devs, 2)
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
			set, err := AcquireDevices(context.Background(), o, devs, 1)
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
	sts, err := InspectDevices(o.Path, devs, 0)
	if err != nil || len(sts) != 2 || sts[0].State != StateHeld || len(sts[0].Queue) != n {
		t.Fatalf("InspectDevices = %+v, %v", sts, err)
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
		t.Fatal("the queue's anchor path was created")
	}
}
