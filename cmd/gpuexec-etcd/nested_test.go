//go:build unix

package main

import (
	"strings"
	"testing"
)

// A job on etcd://.../box/gpu0 is no holder of etcd://.../box: status of
// /box says free, clear --force of /box leaves the job alone, and a job on
// /box runs at once beside it (--wait 0 is not deferred).
func TestNestedKeysAreSeparateLocks(t *testing.T) {
	srv := sharedEtcd(t)
	box := srv.URL("gpuexec-e2e/box", "ttl=10s")
	gpu0 := srv.URL("gpuexec-e2e/box/gpu0", "ttl=10s")
	p, _ := holdJob(t, gpu0)
	if code, out, errOut := run(t, env(), "status", "--lock", box); code != 0 || out != "free\nlock: "+box+"\n" {
		t.Errorf("status of /box while a job holds /box/gpu0: %d %q, want free\n%s", code, out, errOut)
	}
	if code, out, errOut := run(t, env(), "clear", "--force", "--lock", box); code != 0 || !strings.HasPrefix(out, "free") {
		t.Errorf("clear --force of /box while a job holds /box/gpu0: %d %q, want free (nothing cleared)\n%s", code, out, errOut)
	}
	if code, _, errOut := run(t, env(), "--lock", box, "--wait", "0", "--", "true"); code != 0 {
		t.Errorf("a job on /box while a job holds /box/gpu0: %d, want it run at once (0)\n%s", code, errOut)
	}
	if m := statusJSON(t, gpu0); m["state"] != "held" || m["owner"] != "channels" {
		t.Errorf("/box/gpu0 after all that: %v, want still held by its job", m)
	}
	p.stdin.Close() // the job ends
	if code := p.wait(t); code != 0 {
		t.Errorf("the job on /box/gpu0: %d, want 0 (its lock was not lost)\n%s", code, p.err)
	}
}
