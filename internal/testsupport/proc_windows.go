package testsupport

import (
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Gone reports whether the process pid has ended: no process has that pid,
// or it has exited while handles to it keep it known.
func Gone(pid int) bool {
	h, err := windows.OpenProcess(windows.SYNCHRONIZE, false, uint32(pid))
	if err != nil {
		return errors.Is(err, windows.ERROR_INVALID_PARAMETER)
	}
	defer windows.CloseHandle(h)
	ev, err := windows.WaitForSingleObject(h, 0)
	return err == nil && ev == windows.WAIT_OBJECT_0
}

// unused reports whether no running process has pid: none has it, or
// the one that had it has exited. (A process object outlives its process
// while anyone holds a handle to it, Wine's own bookkeeping included; its
// pid is not given to another process meanwhile.)
func unused(pid int) bool { return Gone(pid) }

// kill ends pid (TerminateProcess).
func kill(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
}

// WineVersion is Wine's version when this process runs under Wine, else "".
func WineVersion() string {
	p := windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version")
	if p.Find() != nil {
		return ""
	}
	r, _, _ := p.Call()
	return windows.BytePtrToString(*(**byte)(unsafe.Pointer(&r)))
}

// EnsureConsole gives this process a console of its own, once, so that a
// CTRL_C_EVENT it sends to "every process of its console" reaches only
// itself and the processes it starts: a test binary that Wine starts
// outside a terminal has no console, and one that go test starts on Windows
// shares go's, which must not get the Ctrl+C. (go test reads the test's
// output through a pipe, which the new console leaves alone.) It skips t
// when no console can be had.
func EnsureConsole(t testing.TB) {
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

// ProbeCtrlBreak tells whether this console delivers CTRL_BREAK_EVENT to a
// process group: it starts probe (a process that writes its pid to pidFile,
// as AwaitPIDs reads it, and then runs until killed) in a process group of
// its own, waits at most timeout for its pid, sends that group
// CTRL_BREAK_EVENT and returns GenerateConsoleCtrlEvent's error. probe is
// killed and waited for before ProbeCtrlBreak returns; it fails t when the
// probe does not start or write its pid.
func ProbeCtrlBreak(t testing.TB, timeout time.Duration, probe *exec.Cmd, pidFile string) error {
	t.Helper()
	probe.SysProcAttr = &syscall.SysProcAttr{CreationFlags: windows.CREATE_NEW_PROCESS_GROUP}
	if err := probe.Start(); err != nil {
		t.Fatal(err)
	}
	defer probe.Wait()
	defer probe.Process.Kill()
	AwaitPIDs(t, timeout, pidFile)
	return windows.GenerateConsoleCtrlEvent(windows.CTRL_BREAK_EVENT, uint32(probe.Process.Pid))
}

// reserve keeps pid from being given to another process until release is
// called: it holds a handle to the process, whose object outlives the
// process while a handle is open. Gone and unused still say it has ended.
func reserve(pid int) (release func()) {
	h, err := windows.OpenProcess(windows.SYNCHRONIZE, false, uint32(pid))
	if err != nil {
		return func() {}
	}
	var once sync.Once
	return func() { once.Do(func() { windows.CloseHandle(h) }) }
}
