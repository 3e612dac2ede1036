package etcdlock

// Tests against a real etcd (internal/etcdtest starts one per test or per
// group of tests on loopback ports; they skip without the etcd binary
// outside CI). TestMain doubles as a helper process that holds a lock until
// it is killed.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuexec/gpuexec/internal/etcdtest"
	"github.com/gpuexec/gpuexec/internal/etcdurl"
	"github.com/gpuexec/gpuexec/internal/testlog"
	"github.com/gpuexec/gpuexec/internal/testsupport"
	"github.com/gpuexec/gpuexec/lock"
)

const (
	roleEnv = "GPUEXEC_ETCDLOCK_TEST_ROLE"
	urlEnv  = "GPUEXEC_ETCDLOCK_TEST_URL"
)

// long bounds every wait for a condition; generous for a loaded two-core
// machine.
const long = 20 * time.Second

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "hold" {
		h, err := Backend{}.Acquire(context.Background(), lock.Options{Path: os.Getenv(urlEnv), Owner: "helper", Slug: "hold"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("held", h.Info().Token)
		// Held until killed.
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(testMain(m))
}

// shared is one etcd for the tests that do not stop it (each uses a key of
// its own); nil where there is no etcd binary.
var shared *etcdtest.Server

func testMain(m *testing.M) int {
	if bin := etcdtest.Find(); bin != "" {
		dir, err := os.MkdirTemp("", "etcdlock-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if shared, err = etcdtest.StartIn(bin, dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	code := m.Run()
	if shared != nil {
		shared.Kill()
	}
	if code == 0 {
		// After the tests: the gRPC clients' goroutines end shortly
		// after they are closed.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// sharedEtcd is the shared etcd; the test skips (fails under CI) without
// one.
func sharedEtcd(t *testing.T) *etcdtest.Server {
	t.Helper()
	etcdtest.Binary(t)
	if shared == nil {
		t.Fatal("no shared etcd")
	}
	return shared
}

func key(t *testing.T) string {
	return "gpuexec-test/" + strings.ReplaceAll(t.Name(), "/", "_")
}

func acquire(t *testing.T, o lock.Options) lock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	h, err := Backend{}.Acquire(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Release() })
	return h
}

func reportOf(t *testing.T, o lock.Options) *lock.Report {
	t.Helper()
	r, err := Backend{}.Inspect(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func statusOf(t *testing.T, o lock.Options) *lock.Status { return reportOf(t, o).Locks[0] }

// waitFor polls cond until it holds, failing after long.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testsupport.Await(t, long, what, cond)
}

func queued(t *testing.T, o lock.Options, n int) func() bool {
	return func() bool { return len(reportOf(t, o).Queue) == n }
}

// Contending holders never overlap: inside its critical section each one
// checks, through a separate client, that etcd names it the holder.
func TestContentionZeroOverlaps(t *testing.T) {
	srv := sharedEtcd(t)
	const workers, rounds = 5, 4
	url := srv.URL(key(t), "ttl=5s")
	var inside, overlaps, runs atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				o := lock.Options{Path: url, Owner: "w", Slug: fmt.Sprintf("%d-%d", w, r)}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				h, err := Backend{}.Acquire(ctx, o)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				r, err := Backend{}.Inspect(o)
				if err != nil {
					errs <- err
				} else if st := r.Locks[0]; st.Info == nil || st.Info.Token != h.Info().Token {
					errs <- fmt.Errorf("%s holds the lock, but etcd names %s", o.Slug, st.Holder())
				}
				runs.Add(1)
				inside.Add(-1)
				if err := h.Release(); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if overlaps.Load() != 0 || runs.Load() != workers*rounds {
		t.Errorf("%d overlaps, %d of %d sections ran", overlaps.Load(), runs.Load(), workers*rounds)
	}
	if st := reportOf(t, lock.Options{Path: url}); st.Locks[0].State != lock.StateFree || len(st.Queue) != 0 {
		t.Errorf("left behind: %+v", st)
	}
}

// Waiters are served in arrival order.
func TestFIFO(t *testing.T) {
	srv := sharedEtcd(t)
	url := srv.URL(key(t), "")
	o := lock.Options{Path: url, Owner: "first", Slug: "holder"}
	holder := acquire(t, o)
	const n = 5
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			h, err := Backend{}.Acquire(ctx, lock.Options{Path: url, Owner: "waiter", Slug: fmt.Sprint(i)})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			h.Release()
		})
		waitFor(t, fmt.Sprintf("waiter %d queued", i), queued(t, o, i+1))
	}
	st := reportOf(t, o)
	for i, w := range st.Queue {
		if w.Position != i+1 || w.Slug != fmt.Sprint(i) || !w.Alive || w.Since == "" {
			t.Errorf("queue[%d] = %+v", i, w)
		}
	}
	holder.Release()
	wg.Wait()
	if !slices.Equal(order, []int{0, 1, 2, 3, 4}) {
		t.Errorf("served in order %v, want arrival order", order)
	}
}

// A waiter logs the holder and its place at once and every Report, and
// gives up with a *lock.WaitError naming the holder, leaving no key.
func TestWaitingLineAndDeadline(t *testing.T) {
	srv := sharedEtcd(t)
	url := srv.URL(key(t), "")
	acquire(t, lock.Options{Path: url, Owner: "channels", Slug: "ep12"})
	var logs testlog.Buffer
	// Long enough for the join (dial, lease, session, first listing) and
	// two reports on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := Backend{}.Acquire(ctx, lock.Options{Path: url, Owner: "reels", Slug: "tts", Report: 200 * time.Millisecond, Logger: testlog.Logger(&logs)})
	var werr *lock.WaitError
	if !errors.As(err, &werr) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v, want a *lock.WaitError wrapping DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("gave up after %s, the deadline was 3s", d)
	}
	if !strings.HasPrefix(werr.Holders(), "channels/ep12 (pid ") {
		t.Errorf("WaitError names %v", werr.Holders())
	}
	re := regexp.MustCompile(`waiting for GPU lock: held by channels/ep12 \(pid \d+\) for \d+s; position 1 of 1; waited \d+s, defers in \d+s`)
	if n := len(re.FindAllString(logs.String(), -1)); n < 2 {
		t.Errorf("%d waiting lines naming holder and position, want one at once and one per report:\n%s", n, logs.String())
	}
	if st := reportOf(t, lock.Options{Path: url}); len(st.Queue) != 0 {
		t.Errorf("the waiter left its key: %+v", st.Queue)
	}
}

// TryAcquire takes a free lock, and reports a held one as a WaitError
// wrapping ErrHeld, naming the holder, without leaving a key.
func TestTryAcquire(t *testing.T) {
	srv := sharedEtcd(t)
	o := lock.Options{Path: srv.URL(key(t), ""), Owner: "a", Slug: "b"}
	h, err := Backend{}.TryAcquire(o)
	if err != nil {
		t.Fatalf("TryAcquire of a free lock: %v", err)
	}
	var busy *lock.WaitError
	if _, err := (Backend{}).TryAcquire(o); !errors.As(err, &busy) || !errors.Is(err, lock.ErrHeld) || busy.Holders() != holderOf(h) {
		t.Fatalf("TryAcquire of a held lock: %v, want a WaitError wrapping ErrHeld naming %s", err, holderOf(h))
	}
	if st := reportOf(t, o); len(st.Queue) != 0 {
		t.Errorf("TryAcquire left a key: %+v", st.Queue)
	}
	h.Release()
	if st := reportOf(t, o); st.Locks[0].State != lock.StateFree {
		t.Errorf("after Release: %+v", st)
	}
}

// status shows the holder's record and heartbeat and the queue; clear
// keeps a live holder's lock unless forced, and a forced clear makes the
// holder lose it at once.
func TestStatusAndClear(t *testing.T) {
	srv := sharedEtcd(t)
	url := srv.URL(key(t), "ttl=6s")
	o := lock.Options{Path: url}
	if st := reportOf(t, o); st.Locks[0].State != lock.StateFree || st.Describe() != "free" {
		t.Fatalf("fresh lock: %+v", st)
	}
	var hlogs testlog.Buffer
	h := acquire(t, lock.Options{Path: url, Owner: "channels", Slug: "ep12", Logger: testlog.Logger(&hlogs)})
	if err := h.RecordChild(4250); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	waited := make(chan error, 1)
	got := make(chan lock.Locker, 1)
	go func() {
		w, err := Backend{}.Acquire(wctx, lock.Options{Path: url, Owner: "reels", Slug: "tts"})
		if err != nil {
			waited <- err
			return
		}
		got <- w
	}()
	waitFor(t, "the waiter queued", queued(t, o, 1))

	st := statusOf(t, o)
	info := h.Info()
	if st.State != lock.StateHeld || !st.Alive || st.Info == nil || st.Info.Token != info.Token ||
		st.Info.PID != os.Getpid() || st.Info.ChildPGID != 4250 || st.Info.AcquiredAt == "" || st.Info.Host == "" {
		t.Errorf("held: %+v / %+v", st, st.Info)
	}
	if st.HeartbeatAge < 0 || st.HeartbeatAge > 6*time.Second {
		t.Errorf("heartbeat age %s", st.HeartbeatAge)
	}
	r := reportOf(t, o)
	m := r.JSON()
	if m["state"] != "held" || m["owner"] != "channels" || m["path"] != url || m["staleReason"] != nil {
		t.Errorf("JSON: %v", m)
	}
	if q, _ := m["queue"].([]lock.Waiter); len(q) != 1 || q[0].Slug != "tts" {
		t.Errorf("JSON queue: %v", m["queue"])
	}
	if d := r.Describe(); !strings.HasPrefix(d, "held by channels/ep12 (pid ") || !strings.Contains(d, "\n  1. reels/tts (pid ") {
		t.Errorf("Describe: %q", d)
	}

	var clogs testlog.Buffer
	if _, err := (Backend{}).Clear(lock.Options{Path: url, Logger: testlog.Logger(&clogs)}, false); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("Clear of a live holder: %v, want ErrHeld", err)
	}
	if st, err := (Backend{}).Clear(lock.Options{Path: url, Logger: testlog.Logger(&clogs)}, true); err != nil {
		t.Fatal(err)
	} else if st.State != lock.StateHeld || !strings.HasPrefix(st.Holder(), "channels/ep12 (pid ") {
		t.Errorf("Clear returned %+v, want the live holder it cleared", st)
	}
	select {
	case <-h.Lost():
	case <-time.After(long):
		t.Fatal("a forced clear did not make the holder lose the lock")
	}
	// Clear returns what it cleared, and logs none of it: its caller
	// says it.
	if !strings.Contains(hlogs.String(), "[ERROR] GPU lock lost") || clogs.String() != "" {
		t.Errorf("holder's log:\n%s\nclear's log:\n%s", hlogs.String(), clogs.String())
	}
	// The waiter is next.
	select {
	case err := <-waited:
		t.Fatalf("waiter ended: %v", err)
	case w := <-got:
		defer w.Release()
		if st := statusOf(t, o); st.Info == nil || st.Info.Owner != "reels" || st.Info.AcquiredAt == "" {
			t.Errorf("the waiter holds the lock, but status says %+v", st.Info)
		}
	case <-time.After(long):
		t.Fatal("the waiter did not get the lock after the holder was cleared")
	}
}

// A key under the prefix without a lease (not gpuexec's) is stale and
// cleared without force.
func TestKeyWithoutLeaseIsStale(t *testing.T) {
	srv := sharedEtcd(t)
	k := key(t)
	cli := srv.Client(t, "", "")
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if _, err := cli.Put(ctx, "/"+k+etcdurl.Separator+"/hand-made", `{"pid":1,"owner":"someone","slug":"x","token":"00"}`); err != nil {
		t.Fatal(err)
	}
	o := lock.Options{Path: srv.URL(k, "")}
	st := statusOf(t, o)
	if st.State != lock.StateStale || !strings.Contains(st.Reason, "no lease") {
		t.Fatalf("%+v", st)
	}
	if _, err := (Backend{}).Clear(o, false); err != nil {
		t.Fatal(err)
	}
	if st := reportOf(t, o); st.Locks[0].State != lock.StateFree {
		t.Errorf("after clear: %+v", st)
	}
}

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

func TestTLS(t *testing.T) {
	files := etcdtest.NewTLSFiles(t, t.TempDir())
	srv := etcdtest.Start(t, etcdtest.WithTLS(files))
	q := "cacert=" + files.CA + "&cert=" + files.ClientCert + "&key=" + files.ClientKey
	h := acquire(t, lock.Options{Path: srv.URL("gpuexec/tls", q)})
	if st := statusOf(t, lock.Options{Path: srv.URL("gpuexec/tls", q)}); st.State != lock.StateHeld {
		t.Errorf("%+v", st)
	}
	h.Release()
	// Without the client certificate the server refuses; without TLS it
	// does not answer.
	for _, q := range []string{"cacert=" + files.CA + "&dial-timeout=1s", "dial-timeout=1s"} {
		if _, err := (Backend{}).Inspect(lock.Options{Path: srv.URL("gpuexec/tls", q)}); err == nil {
			t.Errorf("%s: no error", q)
		}
	}
}

func TestAuth(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t, "", "")
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", "s3cret"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("s3cret\n"), 0o600)
	os.WriteFile(bad, []byte("wrong\n"), 0o600)
	// Renewals carry the credentials too: the lock outlives its TTL.
	h := acquire(t, lock.Options{Path: srv.URL("gpuexec/auth", "ttl=2s&user=root&password-file="+good)})
	testsupport.StillBlocked(t, 3*time.Second, "the holder lost the lock", func() bool { return h.(*Held).LostReason() != nil })
	h.Release()
	_, err := Backend{}.Inspect(lock.Options{Path: srv.URL("gpuexec/auth", "user=root&password-file="+bad+"&dial-timeout=2s")})
	if err == nil || errors.Is(err, lock.ErrUnreachable) || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("wrong password: %v, want an authentication error", err)
	}
	_, err = Backend{}.Inspect(lock.Options{Path: srv.URL("gpuexec/auth", "dial-timeout=2s")})
	if err == nil {
		t.Error("no credentials: no error")
	}
}

func holderOf(h lock.Locker) string {
	info := h.Info()
	return info.Holder()
}
