//go:build unix

package lock_test

// Interoperability tests between this package and a re-creation of the seed
// article's Node render lock (testdata/seedlock.cjs). The two share one lock
// file: each must honour the other's records, staleness and release.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/lock"
)

// TestInteropNodeWritesGoReads: a lock held by the seed's Node tool is seen,
// judged alive and respected by this package, and is free once Node exits.
func TestInteropNodeWritesGoReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	n := startNode(t, fastNode, "run", path, "channels", "ep12", "-")
	token, _, _ := n.ready()

	st, err := inspect(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != lock.StateHeld || !st.Alive || st.Info == nil {
		t.Fatalf("Inspect of a live Node lock: state %s alive %v info %v (%s)", st.State, st.Alive, st.Info, st.Reason)
	}
	if st.Info.Owner != "channels" || st.Info.Slug != "ep12" || st.Info.PID != n.pid() || st.Info.Token != token {
		t.Fatalf("Inspect: got %+v, want channels/ep12 pid %d token %s", *st.Info, n.pid(), token)
	}
	if !strings.Contains(st.Holder(), fmt.Sprintf("channels/ep12 (pid %d)", n.pid())) {
		t.Errorf("Holder = %q", st.Holder())
	}

	h, err := lock.TryAcquire(goOpts(path, "try"))
	var werr *lock.WaitError
	if !errors.Is(err, lock.ErrHeld) || !errors.As(err, &werr) || h != nil {
		t.Fatalf("TryAcquire on a live Node lock: h=%v err=%v; want a WaitError wrapping ErrHeld", h, err)
	}
	if hs := werr.Holder(); hs == nil || hs.Info == nil || hs.Info.Token != token {
		t.Fatalf("TryAcquire's WaitError names %+v, want node's token %s", hs, token)
	}
	if _, err := lock.Clear(lock.Options{Path: path}, false); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("Clear of a live Node lock without force: %v, want ErrHeld", err)
	}
	if got := readRecord(t, path)["token"]; got != token {
		t.Fatalf("lock token after refused TryAcquire/Clear = %v, want node's %s", got, token)
	}

	n.stdin.Close() // node releases and exits
	if code := n.wait(); code != 0 {
		t.Fatalf("node exited %d\nstderr: %s", code, n.stderrText())
	}
	if fileExists(path) {
		t.Fatalf("node left its lock behind: %s", readRecord(t, path))
	}
	h, err = lock.TryAcquire(goOpts(path, "after"))
	if err != nil || h == nil {
		t.Fatalf("TryAcquire after node released: h=%v err=%v", h, err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestInteropNodeSignalRelease: the seed's SIGTERM hook releases the lock,
// and a Go waiter queued behind it gets it.
func TestInteropNodeSignalRelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	n := startNode(t, fastNode, "run", path, "reels", "ep3", "-")
	n.ready()

	type res struct {
		h   *lock.Held
		err error
		at  time.Time
	}
	got := make(chan res, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), interopDeadline)
		defer cancel()
		h, err := lock.Acquire(ctx, goOpts(path, "waiter"))
		got <- res{h, err, time.Now()}
	}()
	// The waiter must still be waiting while node holds.
	select {
	case r := <-got:
		t.Fatalf("Go Acquire returned while node held the lock: %v", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	sent := time.Now()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := n.wait(); code != 143 {
		t.Fatalf("node exited %d after SIGTERM, want 143\nstderr: %s", code, n.stderrText())
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("Go Acquire after node's SIGTERM: %v", r.err)
	}
	defer r.h.Release()
	if r.at.Before(sent) {
		t.Fatalf("Go acquired at %s, before node was signalled at %s", r.at, sent)
	}
	if rec := readRecord(t, path); rec["pid"] != float64(os.Getpid()) {
		t.Fatalf("lock after Go acquired: %v", rec)
	}
}

// TestInteropGoWritesNodeReads: a lock held by this package is reported by
// the seed's status, refused by its clear, and waited for by its acquire,
// which gets the lock only after the Go side releases.
func TestInteropGoWritesNodeReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	h, err := lock.TryAcquire(goOpts(path, "ep12"))
	if err != nil || h == nil {
		t.Fatalf("TryAcquire: h=%v err=%v", h, err)
	}
	defer h.Release()
	info := h.Info()

	out, errOut, code := runNode(t, nil, "status", path)
	want := fmt.Sprintf("held by gpuexec/ep12 (pid %d)", os.Getpid())
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "alive") || strings.Contains(out, "stale") {
		t.Fatalf("node status = %q (exit %d, stderr %q), want %q and alive", out, code, errOut, want)
	}

	out, _, code = runNode(t, nil, "clear", path)
	if code == 0 || !strings.Contains(out, "refused") {
		t.Fatalf("node clear of a live Go holder: exit %d, %q; want a refusal", code, out)
	}
	if got := readRecord(t, path)["token"]; got != info.Token {
		t.Fatalf("after node clear, lock token = %v, want Go's %s", got, info.Token)
	}

	n := startNode(t, fastNode, "run", path, "channels", "ep13", "100")
	// Node has seen the Go holder and is queueing: it logs the holder.
	eventually(t, "node to log that it waits for the Go holder", func() bool {
		return strings.Contains(n.stderrText(), fmt.Sprintf("gpuexec/ep12 (pid %d)", os.Getpid()))
	})
	// Give it several more polls in which it must not get the lock.
	select {
	case l := <-n.lines:
		t.Fatalf("node printed %q while Go held the lock", l.text)
	case <-time.After(150 * time.Millisecond):
	}
	if got := readRecord(t, path)["token"]; got != info.Token {
		t.Fatalf("while node waited, lock token = %v, want Go's %s", got, info.Token)
	}

	beforeRelease := time.Now()
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	releasedBy := time.Now()
	token, acquired, seen := n.ready()
	if acquired.UnixMilli() < beforeRelease.UnixMilli() {
		t.Fatalf("node acquired at %s, before the Go side began releasing at %s", acquired.Format(time.StampMilli), beforeRelease.Format(time.StampMilli))
	}
	if seen.Before(beforeRelease) {
		t.Fatalf("node's ready line was read at %s, before Go released at %s", seen, beforeRelease)
	}
	if token == info.Token {
		t.Fatal("node reports Go's token as its own")
	}
	if code := n.wait(); code != 0 {
		t.Fatalf("node run exited %d\nstderr: %s", code, n.stderrText())
	}
	t.Logf("Go released in %s; node acquired %s after release began", releasedBy.Sub(beforeRelease), acquired.Sub(beforeRelease.Truncate(time.Millisecond)))
	if fileExists(path) {
		t.Fatalf("lock left behind: %v", readRecord(t, path))
	}
	if l := lockLeftovers(t, path); len(l) != 0 {
		t.Fatalf("leftover files: %v", l)
	}
}

// TestInteropNodeIgnoresGoExtraFields: a Go record carries host, pidStart
// and childPgid; the seed's Node tool ignores them and treats the live
// holder as alive: status says alive, clear refuses, run times out.
func TestInteropNodeIgnoresGoExtraFields(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	h, err := lock.TryAcquire(goOpts(path, "extra"))
	if err != nil || h == nil {
		t.Fatalf("TryAcquire: h=%v err=%v", h, err)
	}
	defer h.Release()
	if err := h.RecordChild(syscall.Getpgrp()); err != nil {
		t.Fatal(err)
	}
	rec := readRecord(t, path)
	for _, k := range []string{"pid", "acquiredAt", "owner", "slug", "token", "host", "pidStart", "childPgid"} {
		if _, ok := rec[k]; !ok {
			t.Fatalf("Go record %v lacks %q; the test needs gpuexec's extra fields", rec, k)
		}
	}

	out, _, code := runNode(t, nil, "status", path)
	if code != 0 || !strings.Contains(out, "alive") || strings.Contains(out, "stale") {
		t.Fatalf("node status of a live Go holder with extra fields = %q (exit %d)", out, code)
	}
	out, _, code = runNode(t, nil, "clear", path)
	if code == 0 || !strings.Contains(out, "refused") {
		t.Fatalf("node clear: exit %d %q, want refused", code, out)
	}
	env := nodeEnv{"SEEDLOCK_POLL_MS": "20", "SEEDLOCK_MAX_WAIT_MS": "300"}
	out, errOut, code := runNode(t, env, "run", path, "channels", "ep14", "10")
	if code != 75 || strings.Contains(out, "ready") {
		t.Fatalf("node run against a live Go holder: exit %d, stdout %q, stderr %q; want exit 75 without the lock", code, out, errOut)
	}
	if got := readRecord(t, path)["token"]; got != h.Info().Token {
		t.Fatalf("lock token = %v, want Go's %s", got, h.Info().Token)
	}
	select {
	case <-h.Lost():
		t.Fatalf("Go holder lost its lock: %v", h.LostReason())
	default:
	}
}

// TestInteropHeartbeat: each side's heartbeat keeps the other from judging
// a long hold stale, when the other's stale age is shorter than the hold.
func TestInteropHeartbeat(t *testing.T) {
	t.Run("NodeHeartbeatSeenByGo", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gpu.lock")
		n := startNode(t, nodeEnv{"SEEDLOCK_HEARTBEAT_MS": "50"}, "run", path, "channels", "long", "-")
		n.ready()
		fi0, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		// Backdate the lock: only node's heartbeat can make it fresh again.
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
		eventually(t, "node's heartbeat to touch the lock", func() bool {
			fi, err := os.Stat(path)
			return err == nil && !fi.ModTime().Before(fi0.ModTime())
		})
		st, err := inspect(path, time.Minute)
		if err != nil || st.State != lock.StateHeld {
			t.Fatalf("Inspect after node's heartbeat: %v %v", st, err)
		}
		n.stdin.Close()
		if code := n.wait(); code != 0 {
			t.Fatalf("node exited %d", code)
		}
	})
	t.Run("GoHeartbeatSeenByNode", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gpu.lock")
		o := goOpts(path, "long")
		o.Heartbeat, o.Stale = 50*time.Millisecond, time.Hour
		h, err := lock.TryAcquire(o)
		if err != nil || h == nil {
			t.Fatalf("TryAcquire: %v %v", h, err)
		}
		defer h.Release()
		// A node waiter whose stale age is 2 s, waiting 5 s: only Go's
		// heartbeat (50 ms, forty times within the stale age, however
		// loaded the machine) keeps it from clearing the lock.
		env := nodeEnv{"SEEDLOCK_POLL_MS": "20", "SEEDLOCK_STALE_MS": "2000", "SEEDLOCK_MAX_WAIT_MS": "5000"}
		out, errOut, code := runNode(t, env, "run", path, "channels", "ep15", "10")
		if code != 75 || strings.Contains(out, "ready") {
			t.Fatalf("node run: exit %d stdout %q stderr %q; want 75 without the lock", code, out, errOut)
		}
		if got := readRecord(t, path)["token"]; got != h.Info().Token {
			t.Fatalf("lock token = %v, want Go's", got)
		}
	})
}

// TestInteropNodeForceClearGoHolder: `clear --force` from the seed removes a
// live Go holder's lock; the Go holder notices at its next heartbeat and its
// Release leaves the next holder's lock alone.
func TestInteropNodeForceClearGoHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	o := goOpts(path, "victim")
	o.Heartbeat = 20 * time.Millisecond
	h, err := lock.TryAcquire(o)
	if err != nil || h == nil {
		t.Fatalf("TryAcquire: %v %v", h, err)
	}
	defer h.Release()
	out, _, code := runNode(t, nil, "clear", path, "--force")
	if code != 0 || !strings.Contains(out, "cleared") {
		t.Fatalf("node clear --force: exit %d %q", code, out)
	}
	select {
	case <-h.Lost():
	case <-time.After(interopDeadline):
		t.Fatal("Go holder did not notice that node force-cleared its lock")
	}
	n := startNode(t, fastNode, "run", path, "channels", "next", "-")
	token, _, _ := n.ready()
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if got := readRecord(t, path)["token"]; got != token {
		t.Fatalf("after the lost Go holder released, lock token = %v, want node's %s", got, token)
	}
	n.stdin.Close()
	if code := n.wait(); code != 0 {
		t.Fatalf("node exited %d", code)
	}
}
