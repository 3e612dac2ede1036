//go:build windows

package lock

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/windows"

	"github.com/gpuexec/gpuexec/internal/osfile"
	"github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// openElsewhere opens path for reading as another process would, sharing
// what share says.
func openElsewhere(t *testing.T, path string, share uint32) windows.Handle {
	t.Helper()
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := windows.CreateFile(p, windows.GENERIC_READ, share, nil, windows.OPEN_EXISTING, windows.FILE_ATTRIBUTE_NORMAL, 0)
	if err != nil {
		t.Fatalf("opening %s: %v", path, err)
	}
	return h
}

const (
	shareAll    = windows.FILE_SHARE_READ | windows.FILE_SHARE_WRITE | windows.FILE_SHARE_DELETE
	shareNoDel  = windows.FILE_SHARE_READ | windows.FILE_SHARE_WRITE
	shareRead   = windows.FILE_SHARE_READ
	forever     = -1
	briefly     = 150 * time.Millisecond
	notAtAll    = 0
	lockContent = "0123456789abcdef"
)

// A stale lock is cleared (renamed aside, re-read, removed) while other
// processes have it open: at once when they share delete access (gpuexec's
// own readers and Node's do), after a bounded retry when they do not and
// close it soon, and not at all, with the lock left whole, when they keep
// it open.
func TestClearWhileOpenElsewhere(t *testing.T) {
	tests := []struct {
		name    string
		share   uint32
		holdFor time.Duration
		wantErr bool
	}{
		{"reader sharing delete (gpuexec, Node)", shareAll, forever, false},
		{"reader not sharing delete, closing soon", shareNoDel, briefly, false},
		{"reader not sharing delete, never closing", shareNoDel, forever, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := testOptions(t)
			writeLock(t, o.Path, deadPID(t), lockContent)
			judged, err := readStatus(o.Path)
			if err != nil {
				t.Fatal(err)
			}
			h := openElsewhere(t, o.Path, tt.share)
			closed := make(chan struct{})
			closeIt := func() {
				windows.CloseHandle(h)
				close(closed)
			}
			if tt.holdFor > 0 {
				time.AfterFunc(tt.holdFor, closeIt)
			}
			began := time.Now()
			err = removeIfSame(o.Path, judged)
			took := time.Since(began)
			if tt.holdFor <= 0 {
				closeIt()
			}
			<-closed
			switch {
			case tt.wantErr && !errors.Is(err, windows.ERROR_SHARING_VIOLATION) && !errors.Is(err, windows.ERROR_ACCESS_DENIED):
				t.Fatalf("removeIfSame = %v, want a sharing violation", err)
			case tt.wantErr:
				if !strings.Contains(mustRead(t, o.Path), lockContent) {
					t.Fatal("the lock was changed")
				}
				if took < osfile.SharingRetryFor {
					t.Errorf("gave up after %s, before the retry bound %s", took, osfile.SharingRetryFor)
				}
			case err != nil:
				t.Fatalf("removeIfSame = %v (after %s)", err, took)
			default:
				if _, err := os.Stat(o.Path); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("lock still there: %v", err)
				}
			}
			if odd := leftovers(t, o.Path); len(odd) > 0 {
				t.Fatalf("left behind: %v", odd)
			}
		})
	}
}

// A heartbeat sets the mtime while a reader that shares only reading has
// the lock open (File.ReadAllText, Get-Content).
func TestHeartbeatWhileOpenElsewhere(t *testing.T) {
	o := testOptions(t)
	h, err := TryAcquire(o)
	if h == nil || err != nil {
		t.Fatalf("TryAcquire = %v, %v", h, err)
	}
	defer h.Release()
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(o.Path, old, old); err != nil {
		t.Fatal(err)
	}
	rh := openElsewhere(t, o.Path, shareRead)
	defer windows.CloseHandle(rh)
	if err := h.locks[0].touch(); err != nil {
		t.Fatalf("heartbeat with a reader: %v", err)
	}
	fi, err := os.Stat(o.Path)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(fi.ModTime()) > time.Minute {
		t.Fatalf("mtime %s not refreshed", fi.ModTime())
	}
}

// A lock deleted while a reader still has it open (Node's release while
// gpuexec reads it) may linger as "delete pending" until the reader closes
// it, refusing a new create with access denied: the next holder retries.
func TestCreateOverDeletePending(t *testing.T) {
	o := testOptions(t)
	writeLock(t, o.Path, deadPID(t), lockContent)
	h := openElsewhere(t, o.Path, shareAll)
	if err := os.Remove(o.Path); err != nil {
		windows.CloseHandle(h)
		t.Fatalf("removing a lock open with FILE_SHARE_DELETE: %v", err)
	}
	closed := make(chan struct{})
	time.AfterFunc(briefly, func() {
		windows.CloseHandle(h)
		close(closed)
	})
	defer func() { <-closed }()
	held, err := TryAcquire(o)
	if held == nil || err != nil {
		t.Fatalf("TryAcquire over a deleted lock still open elsewhere = %v, %v", held, err)
	}
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultPathIsUnderTEMP(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, temp, want string
	}{
		{"TEMP set", dir, filepath.Join(dir, "gpuexec", "gpu.lock")},
		{"TEMP unset", "", filepath.Join(os.TempDir(), "gpuexec", "gpu.lock")},
		{"TEMP relative", `rel\tmp`, filepath.Join(os.TempDir(), "gpuexec", "gpu.lock")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TEMP", tt.temp)
			if got := DefaultPath(); got != tt.want {
				t.Fatalf("DefaultPath() = %q, want %q", got, tt.want)
			}
		})
	}
}

// Liveness is OpenProcess / GetExitCodeProcess (STILL_ACTIVE) and a wait;
// start times are GetProcessTimes' creation time.
func TestProcessLivenessAndStart(t *testing.T) {
	if !proc.Alive(os.Getpid()) {
		t.Error("this process judged dead")
	}
	if ms, ok := proc.Start(os.Getpid()); !ok || ms <= 0 || ms > time.Now().UnixMilli() {
		t.Errorf("proc.Start(self) = %d, %v", ms, ok)
	}
	for _, pid := range []int{0, -1, deadPID(t)} {
		if proc.Alive(pid) {
			t.Errorf("pid %d judged alive", pid)
		}
	}

	// A running child: alive, started when it was started.
	before := time.Now()
	run := windowsHelper("wait")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	run.Stdin = r
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer func() { w.Close(); run.Wait() }()
	if !proc.Alive(run.Process.Pid) {
		t.Error("a running child judged dead")
	}
	ms, ok := proc.Start(run.Process.Pid)
	if !ok || !withinTolerance(ms, before.UnixMilli()) {
		t.Errorf("proc.Start(child) = %d, %v; started at %d", ms, ok, before.UnixMilli())
	}

	// Exited children whose process object lives on (their handle is
	// still open here), one with the exit code 259 = STILL_ACTIVE.
	for _, code := range []string{"0", "259"} {
		c := windowsHelper("exit " + code)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		c.Process.WithHandle(func(h uintptr) {
			windows.WaitForSingleObject(windows.Handle(h), windows.INFINITE)
		})
		if proc.Alive(c.Process.Pid) {
			t.Errorf("a child that exited with %s, its handle still open, judged alive", code)
		}
		c.Wait()
	}
}

// wineVersion is Wine's version when the tests run under Wine, else "".
func wineVersion() string { return testsupport.WineVersion() }

// windowsHelperEnv makes the test binary play a role of
// TestWindowsHelperProcess: "wait" (until stdin closes) or "exit N".
const windowsHelperEnv = "GPUEXEC_LOCK_TEST_WINDOWS_HELPER"

func windowsHelper(role string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestWindowsHelperProcess$")
	cmd.Env = append(os.Environ(), windowsHelperEnv+"="+role)
	return cmd
}

// TestWindowsHelperProcess is not a test: it is the body of the helper
// processes windowsHelper starts.
func TestWindowsHelperProcess(t *testing.T) {
	role := os.Getenv(windowsHelperEnv)
	switch {
	case role == "":
		t.Skip("not a test: the body of windowsHelper's processes")
	case role == "wait":
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case strings.HasPrefix(role, "exit "):
		code, _ := strconv.Atoi(strings.TrimPrefix(role, "exit "))
		windows.ExitProcess(uint32(code))
	}
	os.Exit(2)
}

// Byte-range locks are mandatory on Windows; the lock byte lies past any
// content, so a locked file (a queue ticket) can still be read.
func TestLockedFileStaysReadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ticket")
	f, err := osfile.CreateExcl(path, osfile.Locked)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ok, err := osfile.TryLock(f); !ok || err != nil {
		t.Fatalf("osfile.TryLock = %v, %v", ok, err)
	}
	if _, err := f.WriteString(lockContent); err != nil {
		t.Fatal(err)
	}
	if b, err := readAllLimited(path); err != nil || string(b) != lockContent {
		t.Fatalf("reading a locked file = %q, %v", b, err)
	}
	g, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if ok, err := osfile.TryLockShared(g); ok || err != nil {
		t.Fatalf("osfile.TryLockShared while locked = %v, %v; want false, nil", ok, err)
	}
	g.Close()
	// osfile.CreateExcl's handle lets the file be removed while open and locked.
	if err := os.Remove(path); err != nil {
		t.Fatalf("removing an open, locked file: %v", err)
	}
	osfile.Unlock(f)
}

// A symbolic link at the lock path is refused, never followed.
func TestSymlinkLockIsRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte(`{"pid":1,"token":"0123456789abcdef"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "gpu.lock")
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("cannot create a symbolic link here (it needs SeCreateSymbolicLinkPrivilege or Developer Mode): %v", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		if v := wineVersion(); v != "" {
			t.Skipf("Wine %s's CreateSymbolicLinkW is a stub: it reports success and creates no link (Lstat: %v)", v, err)
		}
		t.Fatalf("os.Symlink succeeded, but Lstat(%s) = %v, %v", link, fi, err)
	}
	if _, err := readStatus(link); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("readStatus(symlink) = %v, want ErrNotRegular", err)
	}
}
