//go:build windows

package signals

import (
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Go delivers Ctrl+C and Ctrl+Break as os.Interrupt (SIGINT), and closing
// the console, logging off and shutting down as SIGTERM: both are caught.
func TestCaughtWindows(t *testing.T) {
	for _, want := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		found := false
		for _, s := range Caught {
			found = found || s == want
		}
		if !found {
			t.Errorf("%v is not caught", want)
		}
	}
}

// ensureConsole gives this process a console of its own, once, so that a
// CTRL_C_EVENT it sends to "every process of its console" reaches only
// itself and the processes it starts: a test binary that wine starts
// outside a terminal has no console, and one that go test starts on Windows
// shares go's, which must not get the Ctrl+C. (go test reads the test's
// output through a pipe, which the new console leaves alone.)
func ensureConsole(t *testing.T) {
	t.Helper()
	consoleOnce.Do(func() {
		kernel32 := windows.NewLazySystemDLL("kernel32.dll")
		kernel32.NewProc("FreeConsole").Call()
		if ok, _, err := kernel32.NewProc("AllocConsole").Call(); ok == 0 {
			consoleErr = err
		}
	})
	if consoleErr != nil {
		t.Skipf("AllocConsole failed: %v", consoleErr)
	}
}

var (
	consoleOnce sync.Once
	consoleErr  error
)

// wineVersion is Wine's version when the tests run under Wine, else "".
func wineVersion() string {
	p := windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version")
	if p.Find() != nil {
		return ""
	}
	r, _, _ := p.Call()
	return windows.BytePtrToString(*(**byte)(unsafe.Pointer(&r)))
}

// A Ctrl+C in the console reaches Notify's channel as os.Interrupt, and
// ends a wait with 130.
func TestCtrlCIsDelivered(t *testing.T) {
	ensureConsole(t)
	c, stop := Notify()
	defer stop()
	if err := windows.GenerateConsoleCtrlEvent(windows.CTRL_C_EVENT, 0); err != nil {
		if v := wineVersion(); v != "" {
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
