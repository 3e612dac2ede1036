//go:build unix

package lock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/lock"
	"github.com/hashicorp/go-hclog"
)

// Interoperability with the Node tool (see interop_test.go) where the two
// wait for each other: stale locks, contention, sharers.

// TestInteropStale: each side clears the other's lock when its holder is
// gone, or when its heartbeat is too old.
func TestInteropStale(t *testing.T) {
	t.Run("NodeClearsDeadGoLock", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gpu.lock")
		host, _ := os.Hostname()
		dead := exitedPID(t)
		rec := fmt.Sprintf(`{"pid":%d,"acquiredAt":%q,"owner":"gpuexec","slug":"dead","token":%q,"host":%q,"pidStart":%d}`,
			dead, time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), newHexToken(t), host, time.Now().UnixMilli()-1000)
		if err := os.WriteFile(path, []byte(rec), 0o666); err != nil {
			t.Fatal(err)
		}
		if st, err := inspect(path, 0); err != nil || st.State != lock.StateStale {
			t.Fatalf("Go's own judgement of the hand-written dead lock: %v %v", st, err)
		}
		out, _, _ := runNode(t, nil, "status", path)
		if !strings.Contains(out, "stale") {
			t.Fatalf("node status of a dead Go lock = %q", out)
		}
		out, errOut, code := runNode(t, fastNode, "run", path, "channels", "ep16", "10")
		if code != 0 || !strings.Contains(out, "ready") {
			t.Fatalf("node run over a dead Go lock: exit %d stdout %q stderr %q", code, out, errOut)
		}
		if !strings.Contains(errOut, fmt.Sprintf("pid %d", dead)) {
			t.Errorf("node did not log clearing the dead lock: %q", errOut)
		}
		if fileExists(path) {
			t.Fatalf("lock left behind: %v", readRecord(t, path))
		}
		if l := lockLeftovers(t, path); len(l) != 0 {
			t.Fatalf("leftover files: %v", l)
		}
	})
	t.Run("NodeClearsGoLockWithOldHeartbeat", func(t *testing.T) {
		// A live pid (this process) but an mtime past the article's 90
		// minutes: stale by heartbeat, whatever acquiredAt says.
		path := filepath.Join(t.TempDir(), "gpu.lock")
		host, _ := os.Hostname()
		rec := fmt.Sprintf(`{"pid":%d,"acquiredAt":%q,"owner":"gpuexec","slug":"hung","token":%q,"host":%q}`,
			os.Getpid(), time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), newHexToken(t), host)
		if err := os.WriteFile(path, []byte(rec), 0o666); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-91 * time.Minute)
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := runNode(t, fastNode, "run", path, "channels", "ep17", "10")
		if code != 0 || !strings.Contains(out, "ready") || !strings.Contains(errOut, "沒心跳") {
			t.Fatalf("node run over a Go lock without heartbeat: exit %d stdout %q stderr %q", code, out, errOut)
		}
	})
	t.Run("NodeKeepsOldAcquiredAtWithFreshHeartbeat", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gpu.lock")
		rec := fmt.Sprintf(`{"pid":%d,"acquiredAt":"2020-01-01T00:00:00.000Z","owner":"gpuexec","slug":"old","token":%q}`,
			os.Getpid(), newHexToken(t))
		if err := os.WriteFile(path, []byte(rec), 0o666); err != nil {
			t.Fatal(err)
		}
		out, _, _ := runNode(t, nil, "status", path)
		if !strings.Contains(out, "alive") {
			t.Fatalf("node status = %q, want alive (staleness is by mtime)", out)
		}
		if st, err := inspect(path, 0); err != nil || st.State != lock.StateHeld {
			t.Fatalf("Inspect = %v %v, want held", st, err)
		}
	})
	t.Run("GoClearsKilledNodeLock", func(t *testing.T) {
		// The article's taskkill /F case: the holder is killed without
		// running its exit hook; the next waiter clears by "pid gone".
		path := filepath.Join(t.TempDir(), "gpu.lock")
		n := startNode(t, nil, "run", path, "reels", "killed", "-")
		token, _, _ := n.ready()
		if err := n.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		n.wait()
		rec := readRecord(t, path)
		if rec["token"] != token || rec["pid"] != float64(n.pid()) {
			t.Fatalf("killed node's lock = %v", rec)
		}
		var logBuf bytes.Buffer
		var logMu sync.Mutex
		o := goOpts(path, "after-kill")
		o.Logger = hclog.New(&hclog.LoggerOptions{Output: syncWriter{&logMu, &logBuf}, Level: hclog.Info})
		ctx, cancel := context.WithTimeout(context.Background(), interopDeadline)
		defer cancel()
		h, err := lock.Acquire(ctx, o)
		if err != nil {
			t.Fatalf("Go Acquire over a killed node's lock: %v", err)
		}
		defer h.Release()
		if got := readRecord(t, path); got["pid"] != float64(os.Getpid()) {
			t.Fatalf("lock after Acquire = %v", got)
		}
		logMu.Lock()
		logged := logBuf.String()
		logMu.Unlock()
		if !strings.Contains(logged, "cleared stale GPU lock") || !strings.Contains(logged, fmt.Sprintf("pid %d is gone", n.pid())) {
			t.Errorf("Go did not log clearing the stale node lock:\n%s", logged)
		}
		if l := lockLeftovers(t, path); len(l) != 0 {
			t.Fatalf("leftover files: %v", l)
		}
	})
	t.Run("GoClearsHandWrittenDeadNodeLock", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gpu.lock")
		dead := exitedPID(t)
		rec := fmt.Sprintf(`{"pid":%d,"acquiredAt":%q,"owner":"reels","slug":"ep3","token":%q}`,
			dead, time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), newHexToken(t))
		if err := os.WriteFile(path, []byte(rec), 0o666); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), interopDeadline)
		defer cancel()
		h, err := lock.Acquire(ctx, goOpts(path, "after-dead"))
		if err != nil {
			t.Fatalf("Go Acquire over a dead node lock: %v", err)
		}
		if err := h.Release(); err != nil {
			t.Fatal(err)
		}
		if fileExists(path) {
			t.Fatal("lock left behind")
		}
	})
}

// TestInteropMixedContention: three seed Node contenders and three Go
// contenders take turns on one lock. Every critical section creates a shared
// "inside" marker with O_CREAT|O_EXCL on entry (holding the contender's
// identity) and removes it on exit after checking it still holds that
// identity; failure to create, or a marker that changed, is an overlap. Go
// sections also take a non-blocking exclusive flock on a separate truth file,
// which the kernel refuses to two sections at once.
func TestInteropMixedContention(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpu.lock")
	inside := filepath.Join(dir, "inside")
	truth := filepath.Join(dir, "truth")
	const (
		contenders = 3
		rounds     = 4
	)
	start := time.Now()

	var nodes []*nodeProc
	for i := range contenders {
		env := nodeEnv{
			"SEEDLOCK_POLL_MS": strconv.Itoa(5 + 2*i),
			"SEEDLOCK_RUNS":    strconv.Itoa(rounds),
			"SEEDLOCK_GAP_MS":  "5",
		}
		nodes = append(nodes, startNode(t, env, "run", path, "node", fmt.Sprintf("n%d", i), strconv.Itoa(20+15*i), inside))
	}

	var overlaps atomic.Int64
	var goDone atomic.Int64
	errs := make(chan error, contenders*rounds)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), interopDeadline)
	defer cancel()
	for i := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := lock.Options{Path: path, Owner: "go", Slug: fmt.Sprintf("g%d", i), Poll: time.Duration(5+2*i) * time.Millisecond}
			hold := time.Duration(20+15*i) * time.Millisecond
			for r := range rounds {
				h, err := lock.Acquire(ctx, o)
				if err != nil {
					errs <- fmt.Errorf("go %d round %d: %w", i, r, err)
					return
				}
				func() {
					defer func() {
						if err := h.Release(); err != nil {
							errs <- fmt.Errorf("go %d round %d: release: %w", i, r, err)
						}
					}()
					tf, err := os.OpenFile(truth, os.O_RDWR|os.O_CREATE, 0o666)
					if err != nil {
						errs <- err
						return
					}
					defer tf.Close()
					if err := syscall.Flock(int(tf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
						overlaps.Add(1)
						errs <- fmt.Errorf("go %d round %d: truth flock: %w (another Go section is inside)", i, r, err)
						return
					}
					defer syscall.Flock(int(tf.Fd()), syscall.LOCK_UN)
					me := fmt.Sprintf("go %d %s", i, h.Info().Token)
					mf, err := os.OpenFile(inside, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
					if err != nil {
						other, _ := os.ReadFile(inside)
						overlaps.Add(1)
						errs <- fmt.Errorf("go %d round %d: entering: %v: inside is %q", i, r, err, other)
						return
					}
					_, werr := mf.WriteString(me)
					if err := errors.Join(werr, mf.Close()); err != nil {
						errs <- err
						return
					}
					time.Sleep(hold)
					if got, _ := os.ReadFile(inside); string(got) != me {
						overlaps.Add(1)
						errs <- fmt.Errorf("go %d round %d: leaving: inside is %q, want %q", i, r, got, me)
						return
					}
					if err := os.Remove(inside); err != nil {
						errs <- err
						return
					}
					goDone.Add(1)
				}()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	nodeDone := 0
	for i, n := range nodes {
		code := n.wait()
		n.mu.Lock()
		for _, l := range n.all {
			switch {
			case strings.HasPrefix(l.text, "released "):
				nodeDone++
			case strings.HasPrefix(l.text, "overlap"):
				overlaps.Add(1)
				t.Errorf("node %d: %s", i, l.text)
			}
		}
		n.mu.Unlock()
		if code != 0 {
			t.Errorf("node %d (pid %d) exited %d\nstderr: %s", i, n.pid(), code, n.stderrText())
		}
	}
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping critical sections", overlaps.Load())
	}
	if int(goDone.Load()) != contenders*rounds || nodeDone != contenders*rounds {
		t.Fatalf("completed sections: go %d, node %d; want %d each", goDone.Load(), nodeDone, contenders*rounds)
	}
	if fileExists(path) || fileExists(inside) {
		t.Fatalf("left behind: lock %v, inside marker %v", fileExists(path), fileExists(inside))
	}
	if l := lockLeftovers(t, path); len(l) != 0 {
		t.Fatalf("leftover files: %v", l)
	}
	t.Logf("%d sections (%d go, %d node) in %s", goDone.Load()+int64(nodeDone), goDone.Load(), nodeDone, time.Since(start).Round(time.Millisecond))
}

// TestInteropNodeWaitsForSharers: while sharers (Options.ShareMiB) hold a
// device together, the lock file is one seed record the Node tool reads as
// a live holder: it waits while any sharer runs, also after the sharer its
// record named has left, and takes the lock once the last one leaves.
func TestInteropNodeWaitsForSharers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.lock")
	share := func(slug string) *lock.Held {
		o := goOpts(path, slug)
		o.ShareMiB = 4096
		h, err := lock.TryAcquire(o)
		if err != nil {
			t.Fatalf("sharer %s: %v", slug, err)
		}
		return h
	}
	a, b := share("a"), share("b")
	out, _, code := runNode(t, nil, "status", path)
	if code != 0 || !strings.Contains(out, "alive") {
		t.Fatalf("node status of a shared lock = %q (exit %d)", out, code)
	}
	n := startNode(t, fastNode, "run", path, "channels", "ep13", "100")
	eventually(t, "node to log that it waits for the sharers", func() bool {
		return strings.Contains(n.stderrText(), fmt.Sprintf("(pid %d)", os.Getpid()))
	})
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-n.lines:
		t.Fatalf("node printed %q while a sharer still held the lock", l.text)
	case <-time.After(300 * time.Millisecond):
	}
	if rec := readRecord(t, path); rec["share"] != true {
		t.Fatalf("record while one sharer is left: %v", rec)
	}
	before := time.Now()
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	_, acquired, _ := n.ready()
	if acquired.UnixMilli() < before.UnixMilli() {
		t.Fatalf("node acquired at %s, before the last sharer left at %s", acquired.Format(time.StampMilli), before.Format(time.StampMilli))
	}
	if code := n.wait(); code != 0 {
		t.Fatalf("node run exited %d\nstderr: %s", code, n.stderrText())
	}
	if l := lockLeftovers(t, path); len(l) != 0 {
		t.Fatalf("leftover files: %v", l)
	}
}
