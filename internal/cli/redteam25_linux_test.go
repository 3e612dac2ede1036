//go:build linux

package cli

// Findings of a red-team pass over issue 25's status and clear: what they
// say of a lock whose files another local user wrote.

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	gproc "github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// A record that another user (nobody) wrote names root's job, a process
// group of its own in this session as a shell's job is, with its leader's
// start time (anyone reads it in /proc), and a gpuexec that is gone.
// status and clear must not tell root to end that group: it runs as root,
// not as the record's owner, so it is nobody's job that status can vouch
// for. (They said "gpuexec N is gone; its job (process group G) still runs
// ... (to end it: kill -- -G)", and root's job would be killed.)
func TestStatusTellsNoKillOfAnotherUsersGroup(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the record must be another user's file")
	}
	dir, lock := lockIn(t)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	job := exec.Command("/bin/sleep", "300")
	job.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { job.Process.Kill(); job.Wait() })
	pgid := job.Process.Pid
	start, ok := gproc.Start(pgid)
	if !ok {
		t.Fatal("cannot read root's job's start time")
	}
	gone := exec.Command("/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	// pidStart in 1970: the pid is gone even if reused meanwhile.
	rec := fmt.Sprintf(`{"pid":%d,"acquiredAt":"2026-01-01T00:00:00.000Z","owner":"nobody","slug":"x","token":"0123456789abcdef","host":%q,"pidStart":1000,"childPgid":%d,"childStart":%d}`,
		gone.Process.Pid, gproc.HostName(), pgid, start)
	if err := os.WriteFile(lock, []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(lock, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	env := []string{"TMPDIR=" + t.TempDir()}
	kill := fmt.Sprintf("kill -- -%d", pgid)
	r := gx(t, env, "status", "--lock", lock)
	wantCode(t, r, 0)
	if strings.Contains(r.stdout, kill) || strings.Contains(r.stdout, "its job (process group") ||
		!strings.Contains(r.stdout, fmt.Sprintf("process group %d, which runs as uid 0", pgid)) {
		t.Errorf("status printed %q: want root's group named as running as uid 0, not as the job, with no %q", r.stdout, kill)
	}
	r = gx(t, env, "clear", "--lock", lock)
	wantCode(t, r, 1)
	if strings.Contains(r.stderr, kill) || strings.Contains(r.stderr, "its job (process group") {
		t.Errorf("clear's refusal %q: want no %q", r.stderr, kill)
	}
	m := testsupport.StatusJSON(t, long, gpuexecBin, lock)
	if m["jobGroupDoubt"] == nil {
		t.Errorf("status --json %v: want jobGroupDoubt", m)
	}
}
