package main

import (
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	osproc "github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// helperOf waits for gpuexec (pid) to have a child, its helper, and
// returns its pid.
func helperOf(t *testing.T, pid int) int {
	t.Helper()
	var helper int
	waitFor(t, "gpuexec's helper to start", func() bool {
		tree, _ := osproc.Tree()
		for _, c := range tree[pid] {
			if b, err := filepath.EvalSymlinks("/proc/" + strconv.Itoa(c) + "/exe"); err == nil && filepath.Base(b) == "gpuexec-etcd" {
				helper = c
				return true
			}
		}
		return false
	})
	return helper
}

// A gpuexec SIGKILLed while its helper works leaves no helper behind. A
// status whose etcd never answers (a listener that accepts connections and
// says nothing; dial-timeout=1m): the helper dies with gpuexec, by the
// parent-death signal a status keeps. A queued run: the helper, which
// cleared that signal to be able to outlive gpuexec, sees its input end,
// gives its place in the queue back and exits, long before the lease's
// ttl (60 s) would have.
func TestKilledGpuexecLeavesNoHelper(t *testing.T) {
	t.Run("status of a silent etcd", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var conns []net.Conn
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
		t.Cleanup(func() {
			ln.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		})
		p := start(t, env(), "status", "--lock", "etcd://"+ln.Addr().String()+"/gpuexec-e2e/silent?dial-timeout=1m")
		helper := helperOf(t, p.cmd.Process.Pid)
		testsupport.KillOnCleanup(t, helper)
		p.cmd.Process.Kill()
		if !waitGone(helper) {
			t.Errorf("the helper %d of a status still runs %s after gpuexec was SIGKILLed", helper, long)
		}
	})
	t.Run("queued", func(t *testing.T) {
		srv := sharedEtcd(t)
		url := srv.URL("gpuexec-e2e/killed-waiter", "ttl=60s")
		holder, _ := holdJob(t, url)
		w := start(t, env(), "--lock", url, "--wait", "1m", "--", "true")
		waitFor(t, "the waiter queued", func() bool { return queueLen(t, url) == 1 })
		helper := helperOf(t, w.cmd.Process.Pid)
		testsupport.KillOnCleanup(t, helper)
		w.cmd.Process.Kill()
		if !waitGone(helper) {
			t.Errorf("the helper %d of a waiter still runs %s after gpuexec was SIGKILLed", helper, long)
		}
		waitFor(t, "the killed waiter's place to be given back", func() bool { return queueLen(t, url) == 0 })
		holder.stdin.Close()
		holder.wait(t)
	})
}
