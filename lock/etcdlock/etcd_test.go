package etcdlock

// Tests against a real etcd (internal/etcdtest starts one per test or per
// group of tests on loopback ports; they skip without the etcd binary
// outside CI). TestMain doubles as a helper process that holds a lock until
// it is killed.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuexec/gpuexec/internal/etcdtest"
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

func holderOf(h lock.Locker) string {
	info := h.Info()
	return info.Holder()
}
