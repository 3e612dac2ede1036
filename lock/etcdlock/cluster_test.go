//go:build unix

package etcdlock

// Waiters that lose their place, and issue #17's waiter on a three-member
// cluster whose leader is stopped (internal/etcdtest's Cluster; pausing a
// member needs SIGSTOP).

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gpuexec/gpuexec/internal/etcdtest"
	"github.com/gpuexec/gpuexec/internal/etcdurl"
	"github.com/gpuexec/gpuexec/internal/testlog"
	"github.com/gpuexec/gpuexec/lock"
)

// boundedLog keeps the first 64 KiB of a log and counts the lines that
// contain a phrase, however many come: a waiter that loops must not fill
// the test's memory.
type boundedLog struct {
	mu     sync.Mutex
	phrase string
	n      int
	buf    bytes.Buffer
}

func (l *boundedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n += bytes.Count(p, []byte(l.phrase))
	if room := 64<<10 - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (l *boundedLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func (l *boundedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

const requeued = "queueing again at the back"

// acquireAsync queues for the lock in a goroutine, giving up after
// within; take waits for the result. A lock still held when the test
// ends is released.
func acquireAsync(t *testing.T, o lock.Options, within time.Duration) *pending {
	p := &pending{done: make(chan struct{})}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		h, err := Backend{}.Acquire(ctx, o)
		p.r = acquired{h, time.Now(), err}
		close(p.done)
	}()
	t.Cleanup(func() {
		<-p.done
		if p.r.h != nil {
			p.r.h.Release()
		}
	})
	return p
}

type pending struct {
	done chan struct{}
	r    acquired
}

type acquired struct {
	h   lock.Locker
	at  time.Time
	err error
}

// take is the result, if it comes within d.
func (p *pending) take(d time.Duration) (acquired, bool) {
	select {
	case <-p.done:
		return p.r, true
	case <-time.After(d):
		return acquired{}, false
	}
}

// A waiter whose place is lost (its lease expired while etcd was away;
// here revoked) queues again with a new session, says so once per report,
// and takes the lock when it is free; it does not spin on its dead session.
func TestWaiterRequeuesAfterLosingItsPlace(t *testing.T) {
	srv := sharedEtcd(t)
	url := srv.URL(key(t), "ttl=5s")
	o := lock.Options{Path: url}
	holder := acquire(t, lock.Options{Path: url, Owner: "holder"})
	wlog := &boundedLog{phrase: requeued}
	report := 300 * time.Millisecond
	res := acquireAsync(t, lock.Options{Path: url, Owner: "waiter", Report: report, Logger: testlog.Logger(wlog)}, 2*long)
	waitFor(t, "the waiter queued", queued(t, o, 1))
	first := reportOf(t, o).Queue[0]

	cli := srv.Client(t, "", "")
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	resp, err := cli.Get(ctx, "/"+key(t)+etcdurl.Separator+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) != 2 {
		t.Fatalf("the queue in etcd: %v %v", resp, err)
	}
	lost := time.Now()
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[1].Lease)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the waiter queued again", func() bool {
		q := reportOf(t, o).Queue
		return len(q) == 1 && q[0].Seq != first.Seq
	})
	holder.Release()
	r, ok := res.take(long)
	if !ok {
		t.Fatalf("the waiter did not take the free lock (%d lines saying it queued again):\n%s", wlog.count(), wlog)
	}
	if r.err != nil {
		t.Fatalf("waiter: %v\n%s", r.err, wlog)
	}
	// Once per report at most, and at least once.
	if n, most := wlog.count(), int(r.at.Sub(lost)/report)+2; n < 1 || n > most {
		t.Errorf("the waiter said %d times that it queued again in %s (report %s; want 1 to %d):\n%s", n, r.at.Sub(lost).Round(time.Millisecond), report, most, wlog)
	}
}

// Issue #17's waiter: the holder talks to member 0 only, the waiter to
// members 1 and 2, and member 0, the leader, is stopped (SIGSTOP). The
// others elect a new leader, but the renewals they had forwarded to member
// 0 hang for their request timeout (7 s): a waiter renewing on one stream
// saw its lease expire, and then spun on its dead session, never taking
// the lock. Now its renewals go on new streams through the new leader (or,
// should its place be lost after all, it queues again once): it takes the
// lock when the holder's lease has expired, after the holder lost it.
func TestWaiterCutOffFromLeaderTakesTheLock(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	c.MakeLeader(t, 0)
	const ttl = 2 * time.Second
	k := key(t)
	var hlogs testlog.Buffer
	holder := acquire(t, lock.Options{Path: c.URL(k, "ttl=2s&dial-timeout=1s", 0), Owner: "holder", Logger: testlog.Logger(&hlogs)})
	wlog := &boundedLog{phrase: requeued}
	report := 300 * time.Millisecond
	wo := lock.Options{Path: c.URL(k, "ttl=2s&dial-timeout=1s", 1, 2), Owner: "waiter", Report: report, Logger: testlog.Logger(wlog)}
	res := acquireAsync(t, wo, 2*long)
	waitFor(t, "the waiter queued", queued(t, lock.Options{Path: wo.Path}, 1))

	stopped := time.Now()
	c.Members[0].Pause(t)
	r, ok := res.take(long)
	if !ok {
		t.Fatalf("the waiter did not take the lock after the holder's member was stopped (%d lines saying it queued again):\n%s", wlog.count(), wlog)
	}
	if r.err != nil {
		t.Fatalf("waiter: %v\n%s", r.err, wlog)
	}
	select {
	case <-holder.Lost():
	default:
		t.Fatalf("the waiter took the lock at %s, while the holder has not lost it", r.at.Sub(stopped))
	}
	t.Logf("holder lost the lock; the waiter took it %s after member 0 stopped (ttl %s); it queued again %d times", r.at.Sub(stopped).Round(time.Millisecond), ttl, wlog.count())
	if n, most := wlog.count(), int(r.at.Sub(stopped)/report)+2; n > most {
		t.Errorf("the waiter said %d times that it queued again in %s (report %s; want at most %d):\n%s", n, r.at.Sub(stopped).Round(time.Millisecond), report, most, wlog)
	}
	if !strings.Contains(hlogs.String(), "[ERROR] GPU lock lost") {
		t.Errorf("holder's log:\n%s", hlogs.String())
	}
}
