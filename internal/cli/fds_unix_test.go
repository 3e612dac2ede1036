//go:build unix

package cli

// With too few file descriptors (ulimit -n) gpuexec fails as itself: one
// line and 125, never the Go runtime's stack trace (its poller needs two
// descriptors of its own, at the first file opened) and never 126, which
// says the command cannot be run.

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

func TestTooFewFileDescriptors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit int
		args  string
	}{
		{5, "-- true"},
		{8, "-- true"},
		{10, "-- true"},
		{16, "-- true"},
		{5, "status"},
		{8, "--share --vram 1G -- true"},
	} {
		t.Run(fmt.Sprintf("ulimit -n %d; gpuexec %s", tc.limit, tc.args), func(t *testing.T) {
			t.Parallel()
			_, lock := lockIn(t)
			cmd := exec.Command("bash", "-c", fmt.Sprintf("ulimit -n %d; exec %s --lock %s %s", tc.limit, gpuexecBin, lock, tc.args))
			cmd.Env = gpuexecCmd(nil).Env
			r := startProc(t, cmd).wait(t)
			wantCode(t, r, 125)
			lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
			if len(lines) != 1 || strings.Contains(r.stderr, "goroutine") || strings.Contains(r.stderr, "panic") || !strings.Contains(r.stderr, "file descriptors") {
				t.Errorf("stderr is not one line about file descriptors:\n%s", r.stderr)
			}
			if lockExists(lock) {
				t.Errorf("the lock is left behind")
			}
		})
	}
}
