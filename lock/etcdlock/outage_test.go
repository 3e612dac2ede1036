package etcdlock

// Holders and waiters when a holder dies or etcd goes away (see etcd_test.go).

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/etcdtest"
	"github.com/gpuexec/gpuexec/internal/testlog"
	"github.com/gpuexec/gpuexec/lock"
)

// A holder killed with SIGKILL releases nothing; its lease expires after
// the TTL and the next waiter proceeds.
func TestKilledHolderIsTakenOverAfterTTL(t *testing.T) {
	srv := sharedEtcd(t)
	url := srv.URL(key(t), "ttl=2s")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=hold", urlEnv+"="+url)
	stdin, _ := cmd.StdinPipe()
	defer stdin.Close()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	held := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if tok, ok := strings.CutPrefix(sc.Text(), "held "); ok {
				held <- tok
			}
		}
		cmd.Wait()
		close(exited)
	}()
	defer func() { cmd.Process.Kill(); <-exited }()
	select {
	case <-held:
	case <-exited:
		t.Fatal("the holder exited")
	case <-time.After(long):
		t.Fatal("the holder did not take the lock")
	}

	type got struct {
		h   lock.Locker
		at  time.Time
		err error
	}
	res := make(chan got, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), long)
		defer cancel()
		h, err := Backend{}.Acquire(ctx, lock.Options{Path: url, Owner: "next"})
		res <- got{h, time.Now(), err}
	}()
	waitFor(t, "the waiter queued", queued(t, lock.Options{Path: url}, 1))
	select {
	case r := <-res:
		t.Fatalf("the waiter got the lock from a live holder: %v", r.err)
	default:
	}
	killed := time.Now()
	cmd.Process.Kill()
	<-exited
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.h.Release()
	// The lease had at most 2 s left; etcd reaps expired leases every
	// half second.
	if d := r.at.Sub(killed); d > 2*time.Second+5*time.Second {
		t.Errorf("takeover %s after the kill; TTL is 2s", d)
	} else {
		t.Logf("takeover %s after SIGKILL (ttl=2s)", d.Round(time.Millisecond))
	}
}

// etcd restarted under a waiter and a holder: neither loses its place, and
// the waiter gets the lock once the holder releases it.
func TestEtcdRestartWhileWaiting(t *testing.T) {
	srv := etcdtest.Start(t)
	url := srv.URL("gpuexec/restart", "ttl=20s")
	var hlogs testlog.Buffer
	h := acquire(t, lock.Options{Path: url, Owner: "holder", Logger: testlog.Logger(&hlogs)})
	var wlogs testlog.Buffer
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		w, err := Backend{}.Acquire(ctx, lock.Options{Path: url, Owner: "waiter", Report: 200 * time.Millisecond, Logger: testlog.Logger(&wlogs)})
		if err == nil {
			err = w.Release()
		}
		res <- err
	}()
	waitFor(t, "the waiter queued", queued(t, lock.Options{Path: url}, 1))

	srv.Stop()
	srv.Restart(t)

	select {
	case <-h.Lost():
		t.Fatalf("the holder lost the lock over a restart shorter than its TTL: %v", h.LostReason())
	default:
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("waiter: %v\n%s", err, wlogs.String())
		}
	case <-time.After(long):
		t.Fatalf("the waiter did not get the lock after the restart:\n%s", wlogs.String())
	}
	if strings.Contains(wlogs.String(), "queueing again") {
		t.Errorf("the waiter lost its place:\n%s", wlogs.String())
	}
}

// An etcd that cannot be reached at the start is an error at once (after
// the dial timeout), not a wait.
func TestUnreachableAtStart(t *testing.T) {
	etcdtest.Binary(t) // for a port nobody serves, like the others
	url := "etcd://127.0.0.1:1/gpuexec/x?dial-timeout=500ms"
	start := time.Now()
	_, err := Backend{}.Acquire(context.Background(), lock.Options{Path: url})
	if !errors.Is(err, lock.ErrUnreachable) {
		t.Fatalf("Acquire: %v, want ErrUnreachable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s with dial-timeout=500ms", d)
	}
	if _, err := (Backend{}).TryAcquire(lock.Options{Path: url}); !errors.Is(err, lock.ErrUnreachable) {
		t.Errorf("TryAcquire: %v", err)
	}
	if _, err := (Backend{}).Inspect(lock.Options{Path: url}); !errors.Is(err, lock.ErrUnreachable) {
		t.Errorf("Inspect: %v", err)
	}
}

// A holder that loses etcd declares the lock lost, at ERROR, before its
// lease can expire.
func TestHolderLosingEtcdLosesTheLock(t *testing.T) {
	srv := etcdtest.Start(t)
	var logs testlog.Buffer
	h := acquire(t, lock.Options{Path: srv.URL("gpuexec/lost", "ttl=6s&dial-timeout=1s"), Logger: testlog.Logger(&logs)})
	gone := time.Now()
	srv.Kill()
	select {
	case <-h.Lost():
	case <-time.After(long):
		t.Fatal("Lost not closed with etcd gone")
	}
	d := time.Since(gone)
	t.Logf("lost %s after etcd died (ttl=6s)", d.Round(time.Millisecond))
	// Lost at most 4s (2/3 of the TTL) after the last renewal, which was
	// before etcd died.
	if d > 6*time.Second {
		t.Errorf("lost only %s after etcd died: the lease (6s) may have expired first", d)
	}
	if !strings.Contains(logs.String(), "[ERROR] GPU lock lost") {
		t.Errorf("not logged at ERROR:\n%s", logs.String())
	}
}
