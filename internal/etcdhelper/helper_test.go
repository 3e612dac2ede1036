package etcdhelper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/etcdurl"
	"github.com/gpuexec/gpuexec/internal/testlog"
	"github.com/gpuexec/gpuexec/lock"
)

// The helper protocol is tested in-process: the helper is Serve on a pipe,
// serving with the file backend on a lock file that stands for the etcd
// URL. The etcd side itself is tested in package etcdlock against a real
// etcd, and the programs together in cmd/gpuexec-etcd.

// fileAs serves etcd:// paths with lock files in dir.
type fileAs struct{ dir string }

func (f fileAs) file(o lock.Options) lock.Options {
	u, err := etcdurl.Parse(o.Path)
	if err != nil {
		panic(err)
	}
	o.Path = filepath.Join(f.dir, strings.ReplaceAll(strings.Trim(u.Key, "/"), "/", "_")+".lock")
	o.Poll = 10 * time.Millisecond
	return o
}

func (f fileAs) Check(o lock.Options) error { return lock.Files.Check(f.file(o)) }
func (f fileAs) Acquire(ctx context.Context, o lock.Options) (lock.Locker, error) {
	return lock.Files.Acquire(ctx, f.file(o))
}
func (f fileAs) TryAcquire(o lock.Options) (lock.Locker, error) {
	return lock.Files.TryAcquire(f.file(o))
}
func (f fileAs) Inspect(o lock.Options) (*lock.Report, error) { return lock.Files.Inspect(f.file(o)) }
func (f fileAs) Clear(o lock.Options, force bool) (*lock.Status, error) {
	return lock.Files.Clear(f.file(o), force)
}

// inProcessAgent makes Backend's helpers Serve with b in-process for the
// test; kill ends the latest helper as if it had died.
func inProcessAgent(t *testing.T, b lock.Backend) (kill func()) {
	return serveWith(t, func(in io.Reader, out io.Writer, live func() (io.ReadCloser, error)) { Serve(in, out, b, live) })
}

// serveWith makes Backend's helpers run serve in-process for the test; a
// hold gets a liveness pipe (an os.Pipe: its read end is what live
// returns).
func serveWith(t *testing.T, serve func(in io.Reader, out io.Writer, live func() (io.ReadCloser, error))) (kill func()) {
	t.Helper()
	var mu sync.Mutex
	var last func()
	old := start
	t.Cleanup(func() { start = old })
	start = func(log hclog.Logger, withLive bool) (*conn, error) {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		var liveR, liveW *os.File
		if withLive {
			var err error
			if liveR, liveW, err = os.Pipe(); err != nil {
				return nil, err
			}
		}
		live := func() (io.ReadCloser, error) {
			if liveR == nil {
				return nil, errors.New("no liveness pipe")
			}
			return liveR, nil
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			serve(inR, outW, live)
			outW.Close()
			inR.Close()
			if liveR != nil {
				liveR.Close()
			}
		}()
		c := newConn(log, inW, outR)
		c.live = liveW
		c.name = "(in-process)"
		c.exited = done
		c.stopReading = func() { outR.CloseWithError(errors.New("stopped reading")) }
		c.kill = func() {
			inR.CloseWithError(errors.New("killed"))
			outW.CloseWithError(errors.New("killed"))
		}
		mu.Lock()
		last = c.kill
		mu.Unlock()
		return c, nil
	}
	return func() {
		mu.Lock()
		defer mu.Unlock()
		last()
	}
}

const agentURL = "etcd://127.0.0.1:2379/gpuexec/test"

func TestAgentHoldsRecordsAndReleases(t *testing.T) {
	dir := t.TempDir()
	fa := fileAs{dir}
	inProcessAgent(t, fa)
	var logs testlog.Buffer
	o := lock.Options{Path: agentURL, Owner: "channels", Slug: "ep12", Logger: testlog.Logger(&logs)}
	h, err := viaHelper.Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if h.Path() != agentURL || h.Info().Owner != "channels" || h.Info().Slug != "ep12" {
		t.Errorf("held %s by %+v", h.Path(), h.Info())
	}
	file := fa.file(o).Path
	r, err := lock.Inspect(lock.Options{Path: file})
	if err != nil || r.Locks[0].State != lock.StateHeld || r.Locks[0].Info.Token != h.Info().Token {
		t.Fatalf("lock file %+v, %v", r, err)
	}
	if err := h.RecordChild(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if r, _ := lock.Inspect(lock.Options{Path: file}); r.Locks[0].Info == nil || r.Locks[0].Info.ChildPGID != os.Getpid() {
		t.Errorf("childPgid not recorded: %+v", r.Locks[0].Info)
	}
	// Inspect through the helper sees the same holder.
	r, err = viaHelper.Inspect(o)
	info := h.Info()
	if err != nil || r.Locks[0].State != lock.StateHeld || r.Locks[0].Holder() != info.Holder() {
		t.Fatalf("Inspect: %+v, %v", r, err)
	}
	// Contention through the helper is a WaitError wrapping ErrHeld,
	// naming the holder.
	var busy *lock.WaitError
	if _, err := viaHelper.TryAcquire(o); !errors.As(err, &busy) || !errors.Is(err, lock.ErrHeld) || busy.Holders() != info.Holder() {
		t.Fatalf("TryAcquire while held: %v, want a WaitError wrapping ErrHeld naming %s", err, info.Holder())
	}
	// Clear without force names the holder and wraps ErrHeld.
	if _, err := viaHelper.Clear(o, false); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("Clear of a live lock: %v, want ErrHeld", err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal("second Release:", err)
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file left after Release: %v", err)
	}
	for _, want := range []string{"acquired GPU lock", "releasing GPU lock"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q (lines are forwarded from the helper):\n%s", want, logs.String())
		}
	}
	select {
	case <-h.Lost():
		t.Error("Lost closed by an ordinary release")
	default:
	}
}

func TestAgentWaitGivesUpWithTheHolder(t *testing.T) {
	dir := t.TempDir()
	fa := fileAs{dir}
	inProcessAgent(t, fa)
	holder, err := lock.Acquire(context.Background(), fa.file(lock.Options{Path: agentURL, Owner: "reels", Slug: "tts"}))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()

	var logs testlog.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = viaHelper.Acquire(ctx, lock.Options{Path: agentURL, Owner: "ci", Slug: "smoke", Report: 50 * time.Millisecond, Logger: testlog.Logger(&logs)})
	var werr *lock.WaitError
	if !errors.As(err, &werr) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v, want a *lock.WaitError wrapping DeadlineExceeded", err)
	}
	if !strings.Contains(werr.Holders(), "reels/tts") {
		t.Errorf("WaitError names %v, want reels/tts", werr.Holders())
	}
	if !strings.Contains(logs.String(), "waiting for GPU lock: held by reels/tts") || !strings.Contains(logs.String(), "; position 1 of 1; waited ") {
		t.Errorf("no waiting line naming the holder and position:\n%s", logs.String())
	}
	if r, _ := lock.Inspect(fa.file(lock.Options{Path: agentURL})); len(r.Queue) != 0 {
		t.Errorf("queue left behind: %+v", r.Queue)
	}
}

func TestAgentDeathLosesTheLock(t *testing.T) {
	kill := inProcessAgent(t, fileAs{t.TempDir()})
	var logs testlog.Buffer
	h, err := viaHelper.Acquire(context.Background(), lock.Options{Path: agentURL, Logger: testlog.Logger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	kill()
	select {
	case <-h.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost not closed when the helper died")
	}
	if r := h.LostReason(); r == nil || !strings.Contains(r.Error(), "helper") {
		t.Errorf("LostReason %v", r)
	}
	if !strings.Contains(logs.String(), "[ERROR]") {
		t.Errorf("the loss is not logged at ERROR:\n%s", logs.String())
	}
	if err := h.Release(); err == nil {
		t.Error("Release through a dead helper reported success")
	}
}

// A user that goes away without releasing (gpuexec killed) leaves the
// helper to release the lock.
func TestAgentReleasesWhenItsUserIsGone(t *testing.T) {
	dir := t.TempDir()
	fa := fileAs{dir}
	inProcessAgent(t, fa)
	h, err := viaHelper.Acquire(context.Background(), lock.Options{Path: agentURL})
	if err != nil {
		t.Fatal(err)
	}
	h.(*held).c.close() // EOF on the helper's input, no release request
	if _, err := os.Stat(fa.file(lock.Options{Path: agentURL}).Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file left after its user went away: %v", err)
	}
}

func TestAgentRefusesBadPathsWithoutAHelper(t *testing.T) {
	old := start
	t.Cleanup(func() { start = old })
	start = func(hclog.Logger, bool) (*conn, error) {
		t.Fatal("a helper was started for a bad path")
		return nil, nil
	}
	for _, p := range []string{"etcd://127.0.0.1:2379", "etcd://127.0.0.1:2379/", "etcd://user:pw@h:1/k", "etcd://h/k", "etcd://h:1/k?ttl=1s", "etcd://h:1/k?bogus=1"} {
		if _, err := viaHelper.Acquire(context.Background(), lock.Options{Path: p}); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Acquire(%q): %v, want ErrInvalid", p, err)
		}
	}
}

// serveV1 is the helper of the first protocol, as it answered: it took the
// first line for its request and refused any op it did not know.
func serveV1(in io.Reader, out io.Writer, _ func() (io.ReadCloser, error)) {
	var req struct {
		Op string `json:"op"`
	}
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		return
	}
	switch req.Op {
	case "acquire", "try", "inspect", "clear":
		panic("an old helper was sent a request it would have carried out: " + req.Op)
	}
	json.NewEncoder(out).Encode(map[string]string{"event": "error", "error": fmt.Sprintf("lock: unknown request %q", req.Op), "kind": "invalid"})
}

// A gpuexec and a helper of different releases refuse each other with one
// clear line before any lock is touched, in both directions.
func TestProtocolMismatchIsOneClearLine(t *testing.T) {
	// A new gpuexec, an old helper.
	serveWith(t, serveV1)
	o := lock.Options{Path: agentURL}
	_, err1 := viaHelper.Acquire(context.Background(), o)
	_, err2 := viaHelper.TryAcquire(o)
	_, err3 := viaHelper.Inspect(o)
	_, err4 := viaHelper.Clear(o, true)
	for i, err := range []error{err1, err2, err3, err4} {
		if err == nil || !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "different releases") || strings.Contains(err.Error(), "\n") {
			t.Errorf("call %d with an old helper: %v, want one line saying the releases differ", i+1, err)
		}
	}

	// An old gpuexec, a new helper: its first line is its request. The
	// helper does nothing but answer one error line.
	dir := t.TempDir()
	for _, first := range []string{
		`{"op":"clear","path":"` + agentURL + `","force":true}`,
		`{"op":"hello","protocol":1}`,
		`{"op":"hello","protocol":2}`,
		`{"op":"hello","protocol":4}`,
	} {
		var out strings.Builder
		code := Serve(strings.NewReader(first+"\n"+`{"op":"status","path":"`+agentURL+`"}`+"\n"), &out, fileAs{dir}, nil)
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var ev event
		if code == 0 || len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &ev) != nil || ev.Event != "error" ||
			!strings.Contains(ev.Error, "different releases") {
			t.Errorf("first line %s: exit %d, answers:\n%s\nwant one error saying the releases differ", first, code, out.String())
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a refused request touched the lock's folder: %d files", len(ents))
	}
}

// viaHelper is the backend under test.
var viaHelper = Backend{}

// The helper gets every option its backend checks: a short stale with a
// shorter heartbeat given is valid there too.
func TestHelperGetsTheTimings(t *testing.T) {
	inProcessAgent(t, fileAs{t.TempDir()})
	h, err := viaHelper.TryAcquire(lock.Options{Path: agentURL, Stale: 2 * time.Millisecond, Heartbeat: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
}

// A hold that says it passed a liveness pipe the helper cannot open is
// refused with one error line before any lock is touched: a helper that
// cannot see the job must not hold for it.
func TestHoldWithoutItsLivenessPipeIsRefused(t *testing.T) {
	dir := t.TempDir()
	hold := `{"op":"hello","protocol":` + fmt.Sprint(Protocol) + `}` + "\n" + `{"op":"hold","path":"` + agentURL + `","live":true}` + "\n"
	for _, c := range []struct {
		name string
		live func() (io.ReadCloser, error)
	}{
		{"no way to open one", nil},
		{"it cannot be opened", func() (io.ReadCloser, error) { return nil, errors.New("descriptor 3 is not a pipe") }},
	} {
		var out strings.Builder
		code := Serve(strings.NewReader(hold), &out, fileAs{dir}, c.live)
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var ev event
		if code == 0 || len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &ev) != nil || ev.Event != "error" {
			t.Errorf("%s: exit %d, answers:\n%s\nwant the hello and one error", c.name, code, out.String())
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a refused hold touched the lock's folder: %d files", len(ents))
	}
}
