package main

import (
	"path/filepath"
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
