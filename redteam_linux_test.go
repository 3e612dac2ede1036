//go:build linux

package main

// Findings of the red-team pass over issue 24's fixes, as black-box tests.

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// In a sticky folder every user may write (the lock directly in /tmp,
// documented as working "as before"), a waiter's ticket is 0640 in its
// creator's primary group: another user cannot open it. A waiter of
// member B killed with SIGKILL leaves its ticket, which nobody else may
// remove (sticky). Member A's next job must still get the lock once the
// holder ends: a ticket whose kernel lock nobody holds is a dead waiter's.
// (f91db50 ran A's job at once; taking "cannot open" as "alive until its
// mtime is older than --stale" stalls the queue behind a crashed waiter
// for up to --stale, 1h30m by default, while the lock is free.)
func TestKilledWaiterOfAnotherUserInAStickyFolderDoesNotStallTheQueue(t *testing.T) {
	t.Parallel()
	needRootAndFlock(t)
	dir := openDir(t)
	lock := filepath.Join(dir, "gpu.lock")
	flags := filepath.Join(openDir(t), "flags")
	if err := os.Mkdir(flags, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(flags, 0o777)
	ready, release := filepath.Join(flags, "ready"), filepath.Join(flags, "release")

	holder := startProc(t, gxUser(t, memberA, "022", nil, "--lock", lock, "--poll", "1s", "--",
		"/bin/sh", "-c", "touch "+ready+"; while [ ! -e "+release+" ]; do sleep 0.05; done"))
	testsupport.Await(t, long, "member A's holder to start its job", func() bool { return lockExists(ready) })

	tickets := func() []string { m, _ := filepath.Glob(lock + ".ticket-*"); return m }
	crashed := startProc(t, gxUser(t, memberB, "022", nil, "--lock", lock, "--poll", "1s", "--", "true"))
	testsupport.Await(t, long, "member B's waiter to queue", func() bool { return len(tickets()) == 1 })
	syscall.Kill(crashed.pid(), syscall.SIGKILL)
	testsupport.Await(t, long, "member B's waiter to die", crashed.exited)

	next := startProc(t, gxUser(t, memberA, "022", nil, "--lock", lock, "--poll", "1s", "--wait", "15s", "--", "true"))
	testsupport.Await(t, long, "member A's next job to queue", func() bool { return len(tickets()) == 2 })
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wantCode(t, holder.wait(t), 0)
	wantCode(t, next.wait(t), 0)
}
