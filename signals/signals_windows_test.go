//go:build windows

package signals

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/windows"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// A Ctrl+C in the console reaches Notify's channel as os.Interrupt, and
// ends a wait with 130.
func TestCtrlCIsDelivered(t *testing.T) {
	testsupport.EnsureConsole(t)
	c, stop := Notify()
	defer stop()
	if err := windows.GenerateConsoleCtrlEvent(windows.CTRL_C_EVENT, 0); err != nil {
		if v := testsupport.WineVersion(); v != "" {
			t.Skipf("Wine %s cannot send CTRL_C_EVENT to this console: %v", v, err)
		}
		t.Fatalf("GenerateConsoleCtrlEvent(CTRL_C_EVENT, 0): %v", err)
	}
	select {
	case sig := <-c:
		if sig != os.Interrupt || ExitStatus(sig) != 130 || Name(sig) != "SIGINT" {
			t.Fatalf("got %v (status %d, %s), want os.Interrupt, 130, SIGINT", sig, ExitStatus(sig), Name(sig))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Ctrl+C was not delivered")
	}
}

// On Windows Parse takes only what gpuexec can do to a job there: TERM and
// INT (Ctrl+Break) and KILL (terminate the Job Object).
func TestParseWindows(t *testing.T) {
	for _, in := range []string{"HUP", "USR1", "QUIT", "1", "STOP"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", in, got)
		} else if !strings.Contains(err.Error(), "Windows") {
			t.Errorf("Parse(%q): %v does not say what Windows takes", in, err)
		}
	}
}
