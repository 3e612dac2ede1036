//go:build unix

package cli

import (
	"strings"
	"syscall"
	"testing"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// --wait 0 with --vram samples the card before it decides: SIGTERM (or
// Ctrl+C) meanwhile ends gpuexec with the signal's status, as it does a
// wait, not a deferral once the reading is done.
func TestVRAMWaitZeroInterrupted(t *testing.T) {
	_, lock := lockIn(t)
	card := rtx3080(0)
	c := newCard(t, gputest.Fixture{Frames: []gputest.Frame{{GPUs: card}, {GPUs: card, Hang: true}}})
	p := startProc(t, gpuexecCmd(c.env(role("exit")), "--lock", lock, "--vram", "1G", "--wait", "0", "--", helperBin, "0"))
	testsupport.Await(t, long, "a reading of the card under way", func() bool { return gputest.Hanging(c.fixture) })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := p.wait(t)
	wantCode(t, r, 143)
	if !strings.Contains(r.stderr, "interrupted") || strings.Contains(r.stderr, "job started") {
		t.Errorf("stderr:\n%s", r.stderr)
	}
	wantNoLock(t, lock)
}
