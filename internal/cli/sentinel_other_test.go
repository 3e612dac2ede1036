//go:build !linux

package cli

import (
	"strings"
	"testing"

	"github.com/gpuexec/gpuexec/supervisor"
)

// Outside Linux no sentinel is ever started: its argument, typed by a user
// or a script, is one line and 125, never a silent 0.
func TestSentinelArgumentOffLinux(t *testing.T) {
	t.Parallel()
	r := gx(t, nil, supervisor.SentinelArg)
	wantCode(t, r, 125)
	if r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "not run by hand") {
		t.Errorf("want one line on stderr saying it is not run by hand, nothing on stdout:\nstdout %q\nstderr %q", r.stdout, r.stderr)
	}
}
