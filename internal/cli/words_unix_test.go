//go:build unix

package cli

import (
	"os"
	"strings"
	"testing"
)

// A local folder whose name has a colon (legitimate on Unix) is written with
// ./ before it, as the refusal of a URL-shaped --lock says: run, status and
// clear then use the lock file there.
func TestLockInAFolderWithAColon(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	const lock = "./host:2379/gpu.lock"
	for _, tc := range []struct {
		args   []string
		want   int
		stdout string // a prefix of stdout
	}{
		{[]string{"--lock", lock, "--wait", "0", "--", helperBin, "0"}, 0, ""},
		{[]string{"status", "--lock", lock}, 0, "free"},
		{[]string{"clear", "--lock", lock}, 0, "free: nothing to clear"},
	} {
		cmd := gpuexecCmd([]string{role("exit"), "TMPDIR=" + t.TempDir()}, tc.args...)
		cmd.Dir = work
		r := startProc(t, cmd).wait(t)
		wantCode(t, r, tc.want)
		if !strings.HasPrefix(r.stdout, tc.stdout) {
			t.Errorf("%v: stdout %q, want it to begin with %q", tc.args, r.stdout, tc.stdout)
		}
	}
	if fi, err := os.Stat(work + "/host:2379"); err != nil || !fi.IsDir() {
		t.Errorf("no folder host:2379 in the working folder (%v)", err)
	}
	wantNoLock(t, work+"/host:2379/gpu.lock")
}
