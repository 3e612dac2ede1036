//go:build unix

package etcdtest

import (
	"context"
	clientv3 "go.etcd.io/etcd/client/v3"
	"testing"
	"time"
)

// A three-member cluster starts, agrees on a leader, hands the leadership
// over, keeps serving with one member paused or killed, and takes a
// restarted member back.
func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	cli := c.Client(t)
	put := func(members []int, k string) {
		t.Helper()
		// A request caught by a change of leader times out: try again.
		pc := c.Client(t, members...)
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := pc.Put(ctx, k, "v")
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("put %s through members %v: %v", k, members, err)
			}
		}
	}
	put(nil, "/a")
	c.MakeLeader(t, 1)
	if l := c.Leader(t); l != 1 {
		t.Fatalf("leader %d after MakeLeader(1)", l)
	}
	c.Members[1].Pause(t)
	if l := c.Leader(t); l == 1 {
		t.Fatal("the paused member still leads")
	}
	put([]int{0, 2}, "/b")
	c.Members[1].Resume(t)
	c.Members[0].Kill()
	c.Leader(t) // among the others: a request in flight at a change of leader times out
	put([]int{1, 2}, "/c")
	c.Members[0].Restart(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Client(t, 0).Get(ctx, "/", clientv3.WithPrefix())
	if err != nil || resp.Count != 3 {
		t.Fatalf("the restarted member sees %v keys (%v), want 3", resp, err)
	}
	c.Kill()
	c.RestartAll(t)
	if _, err := cli.Get(ctx, "/a"); err != nil {
		t.Fatalf("after a restart of all members: %v", err)
	}
}
