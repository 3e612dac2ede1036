package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Cluster is a cluster of etcd members on loopback, with etcd's default
// heartbeat (100 ms) and election timeout (1 s), each member with a client
// port, a peer port and a data folder of its own. Members are numbered from
// 0, in the order of Members.
type Cluster struct {
	Members []*Server
}

// StartCluster starts a cluster of n members and waits until every member
// serves (at most 20 s after the last one started); the members are
// killed when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c, err := StartClusterIn(Binary(t), t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	return c
}

// StartClusterIn starts the etcd binary bin as a cluster of n members with
// their data under dir, outside any test (for a TestMain); end it with
// Kill.
func StartClusterIn(bin, dir string, n int) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("etcdtest: a cluster of %d members", n)
	}
	var err error
	for try := range 3 {
		// Fresh ports (and folders) for each try: another process may
		// have taken one of them between the choice and the start.
		var c *Cluster
		if c, err = startCluster(bin, filepath.Join(dir, "try"+strconv.Itoa(try)), n); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func startCluster(bin, dir string, n int) (*Cluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	var initial []string
	for i := range n {
		s := &Server{bin: bin, dir: filepath.Join(dir, "m"+strconv.Itoa(i)), name: "m" + strconv.Itoa(i),
			port: ports[2*i], peer: ports[2*i+1]}
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return nil, err
		}
		s.logPath = filepath.Join(s.dir, "etcd.log")
		c.Members = append(c.Members, s)
		initial = append(initial, s.name+"="+s.peerURL())
	}
	for _, s := range c.Members {
		s.cluster = strings.Join(initial, ",")
	}
	if err := c.startAll(); err != nil {
		c.Kill()
		return nil, err
	}
	return c, nil
}

// startAll starts every member that is not running, then waits until all
// serve: a member serves only once a quorum runs.
func (c *Cluster) startAll() error {
	for _, s := range c.Members {
		if !s.Running() {
			if err := s.spawn(); err != nil {
				return err
			}
		}
	}
	deadline := time.Now().Add(startWait)
	var errs []error
	for _, s := range c.Members {
		errs = append(errs, s.awaitServing(deadline))
	}
	return errors.Join(errs...)
}

// RestartAll starts every member that is not running (after all were
// killed, say), on the same ports and data, and waits until all serve.
func (c *Cluster) RestartAll(t testing.TB) {
	t.Helper()
	if err := c.startAll(); err != nil {
		t.Fatal(err)
	}
}

// Kill ends every member with SIGKILL and waits for them.
func (c *Cluster) Kill() {
	for _, s := range c.Members {
		s.Kill()
	}
}

// Endpoints are the client addresses (HOST:PORT) of the members numbered
// members, or of all members if none is named.
func (c *Cluster) Endpoints(members ...int) []string {
	if len(members) == 0 {
		for i := range c.Members {
			members = append(members, i)
		}
	}
	var eps []string
	for _, i := range members {
		eps = append(eps, c.Members[i].Endpoint())
	}
	return eps
}

// URL is an etcd:// lock URL for key naming the members numbered members
// (all if none), with query parameters (without "?") appended.
func (c *Cluster) URL(key, query string, members ...int) string {
	u := "etcd://" + strings.Join(c.Endpoints(members...), ",") + "/" + key
	if query != "" {
		u += "?" + query
	}
	return u
}

// Client is a client of the members numbered members (all if none),
// closed when the test ends.
func (c *Cluster) Client(t testing.TB, members ...int) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, ep := range c.Endpoints(members...) {
		eps = append(eps, "http://"+ep)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Leader is the number of the member that leads the cluster, as the
// running members agree on it; it waits at most 20 s for one.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(startWait)
	for {
		if i, err := c.leader(); err == nil {
			return i
		} else if time.Now().After(deadline) {
			t.Fatalf("etcdtest: no leader within %s: %v", startWait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leader asks each running, unpaused member whom it follows; they must
// agree.
func (c *Cluster) leader() (int, error) {
	ids := map[uint64]int{}
	lead := map[uint64]bool{}
	for i, s := range c.Members {
		s.mu.Lock()
		paused := s.paused
		s.mu.Unlock()
		if !s.Running() || paused {
			continue
		}
		st, err := memberStatus(s)
		if err != nil {
			return 0, err
		}
		ids[st.Header.MemberId] = i
		if st.Leader != 0 {
			lead[st.Leader] = true
		}
	}
	if len(lead) != 1 {
		return 0, fmt.Errorf("the members name %d leaders", len(lead))
	}
	for id := range lead {
		if i, ok := ids[id]; ok {
			return i, nil
		}
	}
	return 0, errors.New("the leader the members name is not among the running members")
}

func memberStatus(s *Server) (*clientv3.StatusResponse, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + s.Endpoint()}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return cli.Status(ctx, "http://"+s.Endpoint())
}

// MakeLeader hands the leadership to member i (etcd's move-leader) and
// waits until the members agree on it.
func (c *Cluster) MakeLeader(t testing.TB, i int) {
	t.Helper()
	deadline := time.Now().Add(startWait)
	for {
		lead := c.Leader(t)
		if lead == i {
			return
		}
		err := c.moveLeader(lead, i)
		if time.Now().After(deadline) {
			t.Fatalf("etcdtest: could not make member %d the leader (member %d leads): %v", i, lead, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) moveLeader(from, to int) error {
	target, err := memberStatus(c.Members[to])
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + c.Members[from].Endpoint()}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = cli.MoveLeader(ctx, target.Header.MemberId)
	return err
}
