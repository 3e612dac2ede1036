//go:build unix

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuexec/gpuexec/internal/etcdhelper"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// pidsEnv names the file a fake etcd helper writes its pid (and those it
// leaves behind) to.
const pidsEnv = "GPUEXEC_TEST_HELPER_PIDS"

// hungURL is an etcd lock no helper of these tests ever reaches; its short
// dial timeout keeps gpuexec's bound on a status, clear or try answer
// short (it allows for the helper's own attempts to reach etcd).
const hungURL = "etcd://127.0.0.1:1/gpuexec/hung?dial-timeout=100ms"

// hungHelpers are fake gpuexec-etcd helpers that stop answering, each at
// another step of the conversation. None ends by itself, or on SIGTERM,
// SIGINT or SIGHUP; each writes its pid to $GPUEXEC_TEST_HELPER_PIDS once it
// has reached the step where it hangs.
var hungHelpers = []struct {
	name, script string
	// sigkill: SIGKILLing gpuexec ends it too (the fake that leaves a
	// process of its own behind leaves that process: no helper of
	// gpuexec's is such).
	sigkill bool
}{
	{"never says hello", `echo $$ > "$` + pidsEnv + `"; exec sleep 3600`, true},
	{"says hello then sleeps", fmt.Sprintf(`echo $$ > "$%s"; printf '%%s\n' '{"event":"hello","protocol":%d}'; exec sleep 3600`, pidsEnv, etcdhelper.Protocol), true},
	{"hangs on the request", fmt.Sprintf(`read -r hello; read -r request; printf '%%s\n' '{"event":"hello","protocol":%d}'; echo $$ > "$%s"; exec sleep 3600`, etcdhelper.Protocol, pidsEnv), true},
	// Its output stays open after it is gone: gpuexec must not wait for
	// the end of it.
	{"leaves a process holding its output", fmt.Sprintf(`sleep 3600 & printf '%%s\n' '{"event":"hello","protocol":%d}'; echo $$ $! > "$%s"; exec sleep 3600`, etcdhelper.Protocol, pidsEnv), false},
}

// writeHungHelper writes the fake helper script into dir and returns its
// path and the file it writes its pids to; the processes it names are
// killed when t ends, if still there.
func writeHungHelper(t *testing.T, dir, name, script string) (helper, pids string) {
	t.Helper()
	slug := strings.ReplaceAll(name, " ", "-")
	helper, pids = filepath.Join(dir, slug), filepath.Join(dir, slug+".pids")
	if err := os.WriteFile(helper, []byte("#!/bin/sh\ntrap '' HUP INT TERM\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b, _ := os.ReadFile(pids)
		for _, f := range strings.Fields(string(b)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 && !testsupport.Gone(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return helper, pids
}

// An etcd helper that stops answering (never says hello, says it and then
// sleeps, hangs on the request, or leaves a process holding its output)
// does not hang gpuexec: status, clear, a try (--wait 0) and a queued run
// each end within the bound on that answer (here about 10 s) with 125 and
// one line naming the helper and the bound, and the helper is killed.
// gx fails the test if gpuexec has not ended within 20 s.
func TestHungEtcdHelperIsKilledWithinItsBound(t *testing.T) {
	t.Parallel()
	for _, h := range hungHelpers {
		for _, c := range []struct {
			name string
			args []string
		}{
			{"status", []string{"status", "--lock", hungURL}},
			{"clear", []string{"clear", "--lock", hungURL}},
			{"try", []string{"--lock", hungURL, "--wait", "0", "--", "true"}},
			{"queued", []string{"--lock", hungURL, "--wait", "1s", "--", "true"}},
		} {
			args := c.args
			t.Run(h.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				helper, pids := writeHungHelper(t, t.TempDir(), h.name, h.script)
				r := gx(t, []string{etcdhelper.Env + "=" + helper, pidsEnv + "=" + pids}, args...)
				if r.code != 125 || len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, helper) || !strings.Contains(r.stderr, "within") {
					t.Errorf("exit %d, want 125 and one line naming the helper %s and the bound it missed:\n%s", r.code, helper, r.stderr)
				}
				for _, pid := range testsupport.AwaitPIDs(t, long, pids) {
					if !testsupport.Gone(pid) {
						t.Errorf("process %d of the hung helper still runs after gpuexec ended", pid)
					}
				}
			})
		}
	}
}
