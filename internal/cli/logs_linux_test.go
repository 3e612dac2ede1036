package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// A holder whose stderr stalls as its job ends (a pipe that nobody reads,
// with room left for its "job exited" line and no more) has not handed the
// lock on before its line about the release is written: the next holder
// stays queued until that line is out, so that its acquired line can only
// come after it in the --log file they share. A holder that logged only
// once the lock was gone let the next one in while its own line waited.
func TestHandoffLogInOrderWhileStderrStalls(t *testing.T) {
	t.Parallel()
	// A long folder name makes the releasing line, which names the
	// lock, far longer than the slack left beside the job exited line.
	dir := filepath.Join(t.TempDir(), strings.Repeat("l", 200))
	lock := filepath.Join(dir, "gpu.lock")
	logFile := filepath.Join(t.TempDir(), "gpuexec.log")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	// One page: what gpuexec writes is appended to it while it fits,
	// and a line that does not fit waits for a reader.
	size, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, os.Getpagesize())
	if err != nil {
		t.Skipf("cannot set the pipe's size: %v", err)
	}
	ready := filepath.Join(t.TempDir(), "ready")
	jobIn, jobStdin, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer jobStdin.Close()
	a := gpuexecCmd([]string{role("hold"), readyEnv + "=" + ready}, "--lock", lock, "--wait", "0", "--owner", "o", "--slug", "a",
		"--log", logFile, "--log-format", "json", "--", helperBin)
	a.Stdin, a.Stderr = jobIn, w
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	jobIn.Close()
	testsupport.KillOnCleanup(t, a.Process.Pid)
	testsupport.Await(t, long, "the holder's job to run", func() bool { _, err := os.Stat(ready); return err == nil })
	b := startProc(t, gpuexecCmd([]string{role("exit")}, "--lock", lock, "--wait", "2m", "--owner", "o", "--slug", "b",
		"--log", logFile, "--log-format", "json", "--", helperBin, "0"))
	testsupport.Await(t, long, "the next job queued", func() bool { return strings.Contains(b.stderr(), "waiting for GPU lock") })

	// Leave room in the pipe for the job exited line, with slack for its
	// duration and any fields of the card's, and not for one more line.
	exited, err := json.Marshal(map[string]any{"@level": "info", "@message": "job exited", "@module": "gpuexec.supervisor",
		"@timestamp": time.Now().Format("2006-01-02T15:04:05.000000Z07:00"), "child": "exit status 0", "duration": "",
		"gpuexec-pid": a.Process.Pid, "owner": "o", "slug": "a", "status": 0})
	if err != nil {
		t.Fatal(err)
	}
	room := len(exited) + 1 + 120
	queued, err := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ) // FIONREAD
	if err != nil {
		t.Fatal(err)
	}
	if size-queued < room {
		t.Fatalf("gpuexec wrote %d bytes to stderr before its job ended: no room left in a pipe of %d", queued, size)
	}
	if _, err := w.Write([]byte(strings.Repeat(" ", size-queued-room))); err != nil {
		t.Fatal(err)
	}
	jobStdin.Close()
	testsupport.Await(t, long, "the holder's job exited line", func() bool { return slugLine(readFile(t, logFile), "a", "job exited") })
	if testsupport.Poll(2*time.Second, func() bool { return slugLine(readFile(t, logFile), "b", "acquired GPU lock") }) {
		t.Errorf("the next job acquired the lock while the holder's line about its release was not written")
	}
	go io.Copy(io.Discard, r)
	wantCode(t, b.wait(t), 0)
	if err := a.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	var order []string
	for _, m := range jsonLines(t, readFile(t, logFile)) {
		order = append(order, fmt.Sprintf("%v %v", m["slug"], m["@message"]))
	}
	got := strings.Join(order, "\n")
	if i, j := strings.Index(got, "a releasing GPU lock"), strings.Index(got, "b acquired GPU lock"); i < 0 || j < i {
		t.Errorf("a's releasing line is not before b's acquired line:\n%s", got)
	}
}

// slugLine reports whether the JSON lines of log hold msg from the job slug.
func slugLine(log, slug, msg string) bool {
	for _, l := range strings.Split(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["slug"] == slug && m["@message"] == msg {
			return true
		}
	}
	return false
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}
