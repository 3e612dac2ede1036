package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuexec/gpuexec/lock"
)

// status's last line names what it read: the lock file, an etcd lock's
// URL, or the devices' lock files and their folder.
func TestReadLine(t *testing.T) {
	dir := filepath.Join(string(filepath.Separator)+"srv", "gpuexec")
	file := func(name, device string) *lock.Status {
		return &lock.Status{State: lock.StateFree, Path: filepath.Join(dir, name), Device: device}
	}
	const url = "etcd://10.0.0.11:2379/gpuexec/gpu-box?user=render&password-file=/etc/gpuexec/pw"
	for _, c := range []struct {
		name string
		r    *lock.Report
		want string
	}{
		{"a lock file", &lock.Report{Path: filepath.Join(dir, "gpu.lock"), Locks: []*lock.Status{file("gpu.lock", "")}},
			"lock: " + filepath.Join(dir, "gpu.lock")},
		{"devices", &lock.Report{Path: filepath.Join(dir, "gpu.lock"), Locks: []*lock.Status{file("gpu0.lock", "0"), file("gpu3.lock", "3")}},
			"locks: gpu0.lock, gpu3.lock in " + dir},
		{"an etcd lock", &lock.Report{Path: url, Locks: []*lock.Status{{State: lock.StateFree, Path: url}}}, "lock: " + url},
	} {
		if got := readLine(c.r); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// A held lock's text names a gone gpuexec and what of its job holds the
// lock, instead of calling it alive, and says which of the holder and its
// job is stopped; clear's refusal says the same.
func TestLockTextOfGoneAndStoppedHolders(t *testing.T) {
	held := func(holder lock.ProcState, group int, job lock.ProcState) *lock.Status {
		return &lock.Status{State: lock.StateHeld, Alive: true, Path: "/srv/gpuexec/gpu.lock",
			Info:          &lock.Info{PID: 8321, Owner: "a", Slug: "wrapper", Token: "0123456789abcdef", AcquiredAt: "2026-10-12T12:18:03.512Z"},
			HolderProcess: holder, JobGroup: group, JobProcess: job}
	}
	for _, c := range []struct {
		name     string
		st       *lock.Status
		has, not []string
	}{
		{"running", held(lock.ProcRunning, 8329, lock.ProcRunning), []string{"held by a/wrapper (pid 8321)", ", alive"}, []string{"stopped", "gone"}},
		{"gone, its job runs", held(lock.ProcGone, 8329, lock.ProcRunning),
			[]string{"held by a/wrapper (pid 8321) since ", "gpuexec 8321 is gone; its job (process group 8329) still runs", "kill -- -8329"}, []string{"alive"}},
		{"gone, its job stopped", held(lock.ProcGone, 8329, lock.ProcStopped),
			[]string{"gpuexec 8321 is gone; its job (process group 8329) is stopped", "kill -CONT -- -8329"}, []string{"alive"}},
		{"gone, its job not told", held(lock.ProcGone, 0, ""), []string{"gpuexec 8321 is gone, but a process of its job still runs"}, []string{"alive"}},
		{"both stopped", held(lock.ProcStopped, 8329, lock.ProcStopped),
			[]string{", alive\n  stopped: gpuexec 8321 and its job (process group 8329) are stopped", "kill -CONT -- -8329 8321"}, nil},
		{"the job stopped", held(lock.ProcRunning, 8329, lock.ProcStopped), []string{"stopped: its job (process group 8329) is stopped"}, []string{"gpuexec 8321 is stopped"}},
		{"gpuexec stopped, its job runs", held(lock.ProcStopped, 8329, lock.ProcRunning), []string{"stopped: gpuexec 8321 is stopped", "its job (process group 8329) runs on"}, nil},
		{"state unknown (off Linux)", held(lock.ProcUnknown, 8329, lock.ProcUnknown), []string{", alive"}, []string{"stopped", "gone"}},
	} {
		text, refusal := lockText(c.st), notCleared(c.st)
		for _, s := range c.has {
			if !strings.Contains(text, s) {
				t.Errorf("%s: %q lacks %q", c.name, text, s)
			}
			if s := strings.TrimPrefix(s, ", alive\n  "); !strings.Contains(refusal, s) {
				t.Errorf("%s: clear's refusal %q lacks %q", c.name, refusal, s)
			}
		}
		for _, s := range c.not {
			if strings.Contains(text, s) {
				t.Errorf("%s: %q says %q", c.name, text, s)
			}
		}
		if strings.Contains(refusal, "\n") {
			t.Errorf("%s: clear's refusal is not one line: %q", c.name, refusal)
		}
	}
}
