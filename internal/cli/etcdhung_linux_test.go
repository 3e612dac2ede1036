package cli

import (
	"fmt"
	"strings"
	"syscall"
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

// A helper that says hello and then writes one endless line does not make
// gpuexec hold it all: what gpuexec keeps of a line from its helper has a
// cap (4 MiB), and it exits 125 with one line. The line here is 128 MiB
// long; gpuexec's peak memory stays under 120 MiB, below the line's own
// size (what is read and dropped waits for the collector: 34–40 MiB alone,
// 66 MiB and then 105–112 MiB seen during a whole -race run on a loaded
// machine; keeping the line took 391 MiB before the cap).
func TestEtcdHelperLineHasACap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := fmt.Sprintf(`echo $$ > "$%s"; printf '%%s\n' '{"event":"hello","protocol":%d}'; printf '{"event":"log","msg":"'; head -c 134217728 /dev/zero | tr '\0' a; exec sleep 3600`, pidsEnv, etcdhelper.Protocol)
	helper, pids := writeHungHelper(t, dir, "endless line", script)
	p := startProc(t, gpuexecCmd([]string{etcdhelper.Env + "=" + helper, pidsEnv + "=" + pids}, "status", "--lock", hungURL))
	r := p.wait(t)
	if r.code != 125 || len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, helper) {
		t.Errorf("exit %d, want 125 and one line naming the helper %s:\n%s", r.code, helper, r.stderr)
	}
	if ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); !ok {
		t.Error("no resource usage of gpuexec")
	} else if ru.Maxrss > 120<<10 { // KiB
		t.Errorf("gpuexec's peak memory was %d MiB, want under 120 MiB (the line is 128 MiB): it kept the helper's endless line", ru.Maxrss>>10)
	}
	for _, pid := range testsupport.AwaitPIDs(t, long, pids) {
		if !testsupport.Gone(pid) {
			t.Errorf("the helper %d still runs after gpuexec ended", pid)
		}
	}
}
