package etcdlock

// status and clear against a real etcd (see etcd_test.go).

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/etcdurl"
	"github.com/gpuexec/gpuexec/internal/testlog"
	"github.com/gpuexec/gpuexec/lock"
)

// status shows the holder's record and heartbeat and the queue; clear
// keeps a live holder's lock unless forced, and a forced clear makes the
// holder lose it at once.
func TestStatusAndClear(t *testing.T) {
	srv := sharedEtcd(t)
	url := srv.URL(key(t), "ttl=6s")
	o := lock.Options{Path: url}
	if st := reportOf(t, o); st.Locks[0].State != lock.StateFree || len(st.Locks) != 1 || len(st.Queue) != 0 || st.Beside != nil {
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
	if len(r.Locks) != 1 || r.Locks[0].Path != url || r.Locks[0].Reason != "" || r.Locks[0].Fields["owner"] != "channels" ||
		!strings.HasPrefix(r.Locks[0].Holder(), "channels/ep12 (pid ") {
		t.Errorf("report: %+v", r.Locks)
	}
	if q := r.Queue; len(q) != 1 || q[0].Position != 1 || q[0].Owner != "reels" || q[0].Slug != "tts" || !q[0].Alive {
		t.Errorf("queue: %+v", q)
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
