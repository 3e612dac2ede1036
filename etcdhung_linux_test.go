package main

import (
	"testing"

	"github.com/gpuexec/gpuexec/internal/etcdhelper"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// gpuexec SIGKILLed while it waits for a hung etcd helper's answer (status,
// a try, a queued run) leaves no helper running: the kernel kills the helper
// with it (its parent-death signal), which a helper of gpuexec's own
// clears only once it holds a request it must see through alone.
func TestKilledGpuexecLeavesNoHungHelper(t *testing.T) {
	t.Parallel()
	for _, h := range hungHelpers {
		if !h.sigkill {
			continue
		}
		for _, c := range []struct {
			name string
			args []string
		}{
			{"status", []string{"status", "--lock", hungURL}},
			{"try", []string{"--lock", hungURL, "--wait", "0", "--", "true"}},
			{"queued", []string{"--lock", hungURL, "--wait", "1m", "--", "true"}},
		} {
			args := c.args
			t.Run(h.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				helper, pids := writeHungHelper(t, t.TempDir(), h.name, h.script)
				p := startProc(t, gpuexecCmd([]string{etcdhelper.Env + "=" + helper, pidsEnv + "=" + pids}, args...))
				pid := testsupport.AwaitPIDs(t, long, pids)[0]
				p.cmd.Process.Kill()
				<-p.done
				if !testsupport.Poll(long, func() bool { return testsupport.Gone(pid) }) {
					t.Errorf("the hung helper %d still runs %s after gpuexec was SIGKILLed", pid, long)
				}
			})
		}
	}
}
