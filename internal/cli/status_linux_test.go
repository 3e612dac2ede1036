package cli

// Black-box tests of what status and clear say of a holder's and a
// waiter's processes: a gpuexec that is gone while its job runs, and a
// holder or waiter that is stopped. Linux: the job dies with its gpuexec
// (Pdeathsig) but for what it left in its group, and stopped processes are
// read from /proc.

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// awaitStatus waits until status --json on lock satisfies ok, and returns
// that object.
func awaitStatus(t *testing.T, lock, what string, ok func(m map[string]any) bool) map[string]any {
	t.Helper()
	var m map[string]any
	testsupport.Await(t, long, what, func() bool {
		m = testsupport.StatusJSON(t, long, gpuexecBin, lock)
		return ok(m)
	})
	return m
}

// A gpuexec SIGKILLed while a process of its job's group runs on: status
// says that gpuexec is gone and names the group that holds the lock (not
// "alive"), in text and JSON, as does clear's refusal; stopped, the group
// is said to be.
func TestStatusOfAKilledGpuexecNamesItsJob(t *testing.T) {
	t.Parallel()
	env := []string{"TMPDIR=" + t.TempDir()}
	_, lock := lockIn(t)
	p, pids := startShellJob(t, env, []string{"--lock", lock, "--owner", "a", "--slug", "wrapper"},
		`sleep 300 & echo $$ $! > "$READY"; wait`)
	if len(pids) != 2 {
		t.Fatalf("job wrote %v, want its pid and its sleep's", pids)
	}
	group, sleep := pids[0], pids[1]
	testsupport.AwaitChildPGID(t, long, lock, group)
	gpid := p.pid()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	testsupport.Await(t, long, fmt.Sprintf("the job's shell (pid %d) to die with gpuexec", group), func() bool { return testsupport.Gone(group) })
	if testsupport.Gone(sleep) {
		t.Fatalf("the job's sleep (pid %d) died too; nothing left to test", sleep)
	}

	m := testsupport.StatusJSON(t, long, gpuexecBin, lock)
	if m["state"] != "held" || m["holderProcess"] != "gone" || m["jobGroup"] != float64(group) || m["jobProcess"] != "running" {
		t.Errorf("status --json %v: want held, holderProcess gone, jobGroup %d, jobProcess running", m, group)
	}
	says := fmt.Sprintf("gpuexec %d is gone; its job (process group %d) still runs", gpid, group)
	r := gx(t, env, "status", "--lock", lock)
	wantCode(t, r, 0)
	if first := lines(r.stdout)[0]; !strings.HasPrefix(first, fmt.Sprintf("held by a/wrapper (pid %d)", gpid)) ||
		!strings.Contains(first, says) || strings.Contains(first, "alive") {
		t.Errorf("status printed %q, want held by a/wrapper (pid %d) ...: %s, not alive", r.stdout, gpid, says)
	}
	r = gx(t, env, "clear", "--lock", lock)
	wantCode(t, r, 1)
	if len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, says) || !strings.Contains(r.stderr, fmt.Sprintf("kill -- -%d", group)) {
		t.Errorf("clear's refusal %q: want one line saying %s, and how to end it (kill -- -%d)", r.stderr, says, group)
	}

	if err := syscall.Kill(-group, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, lock, "status to say the job is stopped", func(m map[string]any) bool { return m["jobProcess"] == "stopped" })
	r = gx(t, env, "status", "--lock", lock)
	if want := fmt.Sprintf("gpuexec %d is gone; its job (process group %d) is stopped", gpid, group); !strings.Contains(r.stdout, want) {
		t.Errorf("status printed %q, want %q", r.stdout, want)
	}
	syscall.Kill(-group, syscall.SIGKILL)
	testsupport.Await(t, long, "the leftover sleep to die", func() bool { return testsupport.Gone(sleep) })
	if r := gx(t, env, "status", "--check", "--lock", lock); r.code != 2 {
		t.Errorf("status --check once the job is gone: %d, want 2 (stale)\n%s", r.code, r.stdout)
	}
}

// A holder stopped with its job (Ctrl+Z, SIGSTOP) and a stopped waiter at
// the head of the queue are shown as stopped, in text and JSON; clear's
// refusal says so too.
func TestStatusShowsStoppedHolderAndWaiter(t *testing.T) {
	t.Parallel()
	env := []string{"TMPDIR=" + t.TempDir()}
	_, lock := lockIn(t)
	h, pids := startShellJob(t, env, []string{"--lock", lock, "--owner", "a", "--slug", "held"}, `echo $$ > "$READY"; exec sleep 300`)
	group, gpid := pids[0], h.pid()
	testsupport.AwaitChildPGID(t, long, lock, group)
	w := startProc(t, gpuexecCmd(env, "--lock", lock, "--owner", "b", "--slug", "next", "--wait", "2m", "--", "true"))
	testsupport.Await(t, long, "the waiter to queue", func() bool { return queueLen(t, lock) == 1 })

	stop := func(sig syscall.Signal, pids ...int) {
		t.Helper()
		for _, pid := range pids {
			if err := syscall.Kill(pid, sig); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop(syscall.SIGSTOP, gpid, -group)
	awaitStatus(t, lock, "status to say the holder and its job are stopped", func(m map[string]any) bool {
		return m["holderProcess"] == "stopped" && m["jobProcess"] == "stopped" && m["jobGroup"] == float64(group)
	})
	want := fmt.Sprintf("stopped: gpuexec %d and its job (process group %d) are stopped", gpid, group)
	r := gx(t, env, "status", "--lock", lock)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, want) {
		t.Errorf("status printed %q, want %q", r.stdout, want)
	}
	r = gx(t, env, "clear", "--lock", lock)
	wantCode(t, r, 1)
	if len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("clear's refusal %q: want one line saying %q", r.stderr, want)
	}
	stop(syscall.SIGCONT, -group, gpid)
	awaitStatus(t, lock, "status to say the holder runs again", func(m map[string]any) bool {
		return m["holderProcess"] == "running" && m["jobProcess"] == "running"
	})

	stop(syscall.SIGSTOP, w.pid())
	first := func(m map[string]any) map[string]any {
		q, _ := m["queue"].([]any)
		if len(q) == 0 {
			return nil
		}
		w, _ := q[0].(map[string]any)
		return w
	}
	m := awaitStatus(t, lock, "status to say the waiter is stopped", func(m map[string]any) bool { return first(m)["process"] == "stopped" })
	if first(m)["pid"] != float64(w.pid()) {
		t.Errorf("queue %v: want the waiter, pid %d, first", m["queue"], w.pid())
	}
	r = gx(t, env, "status", "--lock", lock)
	if want := fmt.Sprintf("1. b/next (pid %d) waiting since ", w.pid()); !strings.Contains(r.stdout, want) ||
		!strings.Contains(r.stdout, fmt.Sprintf(", stopped (Ctrl+Z or SIGSTOP): it takes nothing until it is continued (kill -CONT %d)", w.pid())) {
		t.Errorf("status printed %q, want the waiter shown stopped", r.stdout)
	}
	stop(syscall.SIGCONT, w.pid())
}
