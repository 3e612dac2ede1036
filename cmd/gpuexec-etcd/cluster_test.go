//go:build unix

package main

// Fencing on a three-member etcd cluster whose members fail, as a user's
// gpuexec processes see it (internal/etcdtest's Cluster). Exclusion is
// judged by the truth file: the hold job holds a non-blocking flock on it
// while it runs, and every critical job takes it without blocking and
// leaves an "overlap" file if it cannot.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gpuexec/gpuexec/internal/etcdtest"
	"github.com/gpuexec/gpuexec/internal/etcdurl"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// span is when a critical job ran.
type span struct{ start, end time.Time }

// ranJobs reads the "ran-NAME" files of the critical jobs in work.
func ranJobs(t *testing.T, work string) map[string]span {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(work, "ran-*"))
	ran := map[string]span{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var a, z int64
		if _, err := fmt.Sscan(string(b), &a, &z); err != nil {
			t.Fatalf("%s: %q: %v", f, b, err)
		}
		ran[strings.TrimPrefix(filepath.Base(f), "ran-")] = span{time.Unix(0, a), time.Unix(0, z)}
	}
	return ran
}

func overlapsIn(work string) []string {
	files, _ := filepath.Glob(filepath.Join(work, "overlap-*"))
	return files
}

// goneAt watches the process pid (not a child of this one) and returns a
// function that waits until it has ended and says when that was seen (at
// most a few milliseconds late).
func goneAt(pid int) func() time.Time {
	done := make(chan struct{})
	var at time.Time
	go func() {
		testsupport.Poll(3*long, func() bool { return testsupport.Gone(pid) })
		at = time.Now()
		close(done)
	}()
	return func() time.Time { <-done; return at }
}

// leftInEtcd awaits that etcd holds no key under the lock's prefix and no
// lease (a lease a gpuexec could not revoke expires within its TTL).
func leftInEtcd(t *testing.T, c *etcdtest.Cluster, key string) {
	t.Helper()
	cli := c.Client(t)
	var left string
	ok := testsupport.Poll(long, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys, err := cli.Get(ctx, "/"+key+etcdurl.Separator+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			left = err.Error()
			return false
		}
		leases, err := cli.Leases(ctx)
		if err != nil {
			left = err.Error()
			return false
		}
		left = fmt.Sprintf("%d keys, %d leases", keys.Count, len(leases.Leases))
		return keys.Count == 0 && len(leases.Leases) == 0
	})
	if !ok {
		t.Errorf("left in etcd after %s: %s", long, left)
	}
}

// A holder whose etcd member is stopped (SIGSTOP: it answers nothing) while
// the other two keep quorum stops its job before etcd can let its lease
// expire: within the TTL of the stop, since the last renewal etcd confirmed
// was sent before it. The next waiter, talking to the other two members,
// starts only after the job is gone. With member 0 the leader (issue #17),
// the others elect a new one first, which restarts the leases' countdown.
func TestCutOffHolderStopsBeforeTheNextJob(t *testing.T) {
	for _, c := range []struct {
		name   string
		leader int
	}{{"member 0 follows", 1}, {"member 0 leads", 0}} {
		t.Run(c.name, func(t *testing.T) {
			const ttl = 3 * time.Second
			cl := etcdtest.StartCluster(t, 3)
			cl.MakeLeader(t, c.leader)
			work := t.TempDir()
			key := "gpuexec-e2e/cut-off"
			hURL := cl.URL(key, "ttl=3s&dial-timeout=1s", 0)
			wURL := cl.URL(key, "ttl=3s&dial-timeout=1s", 1, 2)
			holder, job := holdJobIn(t, hURL, []string{workEnv + "=" + work}, "--kill-after", "500ms")
			waiter := start(t, env(roleEnv+"=critical", workEnv+"="+work, nameEnv+"=waiter"),
				"--lock", wURL, "--wait", "1m", "--report", "1s", "--slug", "next", "--", jobBin)
			waitFor(t, "the waiter queued", func() bool { return queueLen(t, wURL) == 1 })
			jobGone := goneAt(mustAtoi(t, job[0]))

			stopped := time.Now()
			cl.Members[0].Pause(t)
			if code := holder.wait(t); code != 125 || !strings.Contains(holder.err.String(), "stopping the job so that two jobs never share the GPU") {
				t.Errorf("holder: %d, want 125 and the job stopped\n%s", code, holder.err)
			}
			if code := waiter.wait(t); code != 0 {
				t.Fatalf("waiter: %d\n%s", code, waiter.err)
			}
			end := jobGone()
			next, ok := ranJobs(t, work)["waiter"]
			if !ok {
				t.Fatal("the waiter's job left no evidence")
			}
			if o := overlapsIn(work); len(o) != 0 {
				t.Errorf("jobs overlapped: %v", o)
			}
			// The last renewal etcd confirmed was sent before the stop;
			// etcd may let the lease expire a TTL after it.
			if d := end.Sub(stopped); d >= ttl {
				t.Errorf("the holder's job ran %s after its member stopped; etcd could let its lease (ttl %s) expire before", d.Round(time.Millisecond), ttl)
			}
			if !next.start.After(end) {
				t.Errorf("the next job started %s before the holder's job was gone", end.Sub(next.start))
			}
			t.Logf("member 0 stopped; the holder's job was gone %s later, the next job started %s later (ttl %s)",
				end.Sub(stopped).Round(time.Millisecond), next.start.Sub(stopped).Round(time.Millisecond), ttl)
			cl.Members[0].Resume(t)
			leftInEtcd(t, cl, key)
		})
	}
}

// With --on-lost continue, a holder cut off from etcd lets its job finish:
// once its lease has expired the next job starts beside it. This is what
// docs/etcd.md says the option gives up.
func TestCutOffHolderOnLostContinueShares(t *testing.T) {
	cl := etcdtest.StartCluster(t, 3)
	cl.MakeLeader(t, 1)
	work := t.TempDir()
	hURL := cl.URL("gpuexec-e2e/continue", "ttl=3s&dial-timeout=1s", 0)
	wURL := cl.URL("gpuexec-e2e/continue", "ttl=3s&dial-timeout=1s", 1, 2)
	holder, _ := holdJobIn(t, hURL, []string{workEnv + "=" + work}, "--on-lost", "continue")
	waiter := start(t, env(roleEnv+"=critical", workEnv+"="+work, nameEnv+"=waiter"),
		"--lock", wURL, "--wait", "1m", "--slug", "next", "--", jobBin)
	waitFor(t, "the waiter queued", func() bool { return queueLen(t, wURL) == 1 })
	cl.Members[0].Pause(t)
	if code := waiter.wait(t); code != 0 {
		t.Fatalf("waiter: %d\n%s", code, waiter.err)
	}
	if holder.exited() || !strings.Contains(holder.err.String(), "letting it finish (--on-lost continue)") {
		t.Fatalf("holder:\n%s", holder.err)
	}
	if o := overlapsIn(work); len(o) != 1 {
		t.Errorf("%d overlapping jobs; with --on-lost continue the next job starts beside the holder's", len(o))
	}
	holder.stdin.Close()
	holder.wait(t)
}

// The leader is killed while a job holds the lock and three wait: the
// holder's renewals go through the new leader, so the job keeps running
// past the point where it would have been stopped, no second holder
// appears, and the waiters are served in their order.
func TestLeaderKilledWhileHolding(t *testing.T) {
	// An election takes one to two seconds, and more on a machine busy
	// with other tests (it once took long enough for a holder with a 6 s
	// TTL to stop its job); the holder stops 6 s after its last confirmed
	// renewal.
	const ttl = 9 * time.Second
	cl := etcdtest.StartCluster(t, 3)
	url := cl.URL("gpuexec-e2e/leader-killed", "ttl=9s")
	work := t.TempDir()
	holder, _ := holdJobIn(t, url, []string{workEnv + "=" + work})
	var waiters []*proc
	for i := range 3 {
		w := start(t, env(roleEnv+"=critical", workEnv+"="+work, nameEnv+"="+fmt.Sprint(i)),
			"--lock", url, "--wait", "1m", "--slug", fmt.Sprint(i), "--", jobBin)
		waiters = append(waiters, w)
		waitFor(t, fmt.Sprintf("waiter %d queued", i), func() bool { return queueLen(t, url) == i+1 })
	}
	lead := cl.Leader(t)
	cl.Members[lead].Kill()
	testsupport.StillBlocked(t, ttl*2/3+2*time.Second, "the holder stopped or a waiter started", func() bool {
		return holder.exited() || slices.ContainsFunc(waiters, (*proc).exited) || len(ranJobs(t, work)) > 0
	})
	// etcd agrees: the holder holds, renewed within the last half TTL,
	// and the waiters queue in their order.
	m := statusJSON(t, url)
	age, _ := m["heartbeatAgeSeconds"].(float64)
	q, _ := m["queue"].([]any)
	var slugs []string
	for _, w := range q {
		slugs = append(slugs, fmt.Sprint(w.(map[string]any)["slug"]))
	}
	if m["state"] != "held" || m["slug"] != "ep12" || age > ttl.Seconds()/2 || !slices.Equal(slugs, []string{"0", "1", "2"}) {
		t.Errorf("status after the leader (member %d) was killed: %v", lead, m)
	}
	holder.stdin.Close()
	if code := holder.wait(t); code != 0 || strings.Contains(holder.err.String(), "GPU lock lost") {
		t.Errorf("holder: %d\n%s", code, holder.err)
	}
	for i, w := range waiters {
		if code := w.wait(t); code != 0 {
			t.Errorf("waiter %d: %d\n%s", i, code, w.err)
		}
	}
	ran := ranJobs(t, work)
	order := []string{"0", "1", "2"}
	slices.SortFunc(order, func(a, b string) int { return ran[a].start.Compare(ran[b].start) })
	if len(ran) != 3 || !slices.Equal(order, []string{"0", "1", "2"}) {
		t.Errorf("waiters ran in order %v (%d ran), want arrival order", order, len(ran))
	}
	if o := overlapsIn(work); len(o) != 0 {
		t.Errorf("jobs overlapped: %v", o)
	}
	cl.Members[lead].Restart(t)
	leftInEtcd(t, cl, "gpuexec-e2e/leader-killed")
}

// All members down while a job holds the lock, then back: the holder stops
// its job within the TTL (it cannot renew) and exits 125; the waiter keeps
// waiting, and once etcd is back and the stopped holder's lease has
// expired (etcd restarts every lease's countdown when it comes back), it
// takes the lock. Never two holders.
func TestAllMembersDownWhileHolding(t *testing.T) {
	const ttl = 3 * time.Second
	cl := etcdtest.StartCluster(t, 3)
	key := "gpuexec-e2e/all-down"
	url := cl.URL(key, "ttl=3s&dial-timeout=1s")
	work := t.TempDir()
	holder, job := holdJobIn(t, url, []string{workEnv + "=" + work}, "--kill-after", "500ms")
	waiter := start(t, env(roleEnv+"=critical", workEnv+"="+work, nameEnv+"=waiter"),
		"--lock", url, "--wait", "1m", "--report", "1s", "--slug", "next", "--", jobBin)
	waitFor(t, "the waiter queued", func() bool { return queueLen(t, url) == 1 })
	jobGone := goneAt(mustAtoi(t, job[0]))

	down := time.Now()
	cl.Kill()
	if code := holder.wait(t); code != 125 || !strings.Contains(holder.err.String(), "[ERROR] gpuexec.lock: GPU lock lost") {
		t.Errorf("holder: %d, want 125 and the loss logged\n%s", code, holder.err)
	}
	end := jobGone()
	if d := end.Sub(down); d >= ttl {
		t.Errorf("the holder's job ran %s after etcd went down (ttl %s)", d.Round(time.Millisecond), ttl)
	}
	if waiter.exited() || len(ranJobs(t, work)) != 0 {
		t.Fatalf("the waiter ended while etcd was down:\n%s", waiter.err)
	}
	back := time.Now()
	cl.RestartAll(t)
	if code := waiter.wait(t); code != 0 {
		t.Fatalf("waiter: %d\n%s", code, waiter.err)
	}
	next := ranJobs(t, work)["waiter"]
	if !next.start.After(end) {
		t.Errorf("the next job started before the holder's job was gone")
	}
	if o := overlapsIn(work); len(o) != 0 {
		t.Errorf("jobs overlapped: %v", o)
	}
	t.Logf("etcd down: the holder's job was gone %s later; etcd back %s after it went down, the next job started %s after that (ttl %s)",
		end.Sub(down).Round(time.Millisecond), back.Sub(down).Round(time.Millisecond), next.start.Sub(back).Round(time.Millisecond), ttl)
	leftInEtcd(t, cl, key)
}

// A storm: contenders run short jobs through a three-member cluster while
// one member at a time is killed and restarted. No two jobs overlap, every
// job runs, and nothing is left in etcd.
func TestStormWhileMembersFail(t *testing.T) {
	contenders, sections := 6, 20
	if testing.Short() {
		contenders, sections = 3, 5
	}
	cl := etcdtest.StartCluster(t, 3)
	key := "gpuexec-e2e/storm"
	url := cl.URL(key, "ttl=6s")
	work := t.TempDir()
	var done atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan string, contenders*sections)
	for i := range contenders {
		wg.Go(func() {
			for r := range sections {
				ctx, cancel := context.WithTimeout(context.Background(), 4*long)
				cmd := exec.CommandContext(ctx, gpuexecBin, "--lock", url, "--wait", "2m", "--slug", fmt.Sprintf("c%d-s%d", i, r), "--", jobBin)
				cmd.Env = env(roleEnv+"=critical", workEnv+"="+work, nameEnv+"="+fmt.Sprintf("c%d-s%d", i, r))
				out, err := cmd.CombinedOutput()
				cancel()
				if err != nil {
					errs <- fmt.Sprintf("contender %d section %d: %v\n%s", i, r, err, out)
				}
				done.Add(1)
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	over := func() bool {
		select {
		case <-finished:
			return true
		default:
			return false
		}
	}
	// Kill a member, let a few jobs run on the other two, restart it, let
	// a few more run; then the next member.
	total := int32(contenders * sections)
	progress := func(what string) {
		from := done.Load()
		if !testsupport.Poll(2*long, func() bool { return over() || done.Load() >= min(from+3, total) }) {
			t.Fatalf("no job ran for %s with %s", 2*long, what)
		}
	}
	kills := 0
	for m := 0; !over(); m = (m + 1) % 3 {
		cl.Members[m].Kill()
		kills++
		progress(fmt.Sprintf("member %d killed", m))
		cl.Members[m].Restart(t)
		progress(fmt.Sprintf("member %d restarted", m))
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if o, ran := overlapsIn(work), ranJobs(t, work); len(o) != 0 || len(ran) != int(total) {
		t.Errorf("%d overlapping jobs, %d of %d jobs ran", len(o), len(ran), total)
	}
	t.Logf("%d jobs through %d kills and restarts of a member", total, kills)
	leftInEtcd(t, cl, key)
}
