package lock

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/testlog"
)

// The helper protocol (agent.go) is tested in-process: the Etcd backend's
// helper is ServeAgent on a pipe, serving with the file backend on a lock
// file that stands for the etcd URL. The etcd side itself is tested in
// package etcdlock against a real etcd.

// fileAs serves etcd:// paths with lock files in dir.
type fileAs struct{ dir string }

func (f fileAs) file(o Options) Options {
	u, err := ParseEtcdURL(o.Path)
	if err != nil {
		panic(err)
	}
	o.Path = filepath.Join(f.dir, strings.ReplaceAll(strings.Trim(u.Key, "/"), "/", "_")+".lock")
	o.Poll = 10 * time.Millisecond
	return o
}

func (f fileAs) Acquire(ctx context.Context, o Options) (Locker, error) {
	return Files.Acquire(ctx, f.file(o))
}
func (f fileAs) TryAcquire(o Options) (Locker, bool, error) { return Files.TryAcquire(f.file(o)) }
func (f fileAs) Inspect(o Options) (*Status, error)         { return Files.Inspect(f.file(o)) }
func (f fileAs) Clear(o Options, force bool) (*Status, error) {
	return Files.Clear(f.file(o), force)
}

// inProcessAgent makes the Etcd backend serve with b in-process for the
// test; kill ends the latest helper as if it had died.
func inProcessAgent(t *testing.T, b Backend) (kill func()) {
	t.Helper()
	var mu sync.Mutex
	var last func()
	old := startAgent
	t.Cleanup(func() { startAgent = old })
	startAgent = func(log hclog.Logger) (*agentConn, error) {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			ServeAgent(inR, outW, b)
			outW.Close()
			inR.Close()
		}()
		c := newAgentConn(log, inW, outR)
		c.wait = func() error { <-done; return nil }
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
	o := Options{Path: agentURL, Owner: "channels", Slug: "ep12", Logger: testlog.Logger(&logs)}
	h, err := Etcd.Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if h.Path() != agentURL || h.Info().Owner != "channels" || h.Info().Slug != "ep12" {
		t.Errorf("held %s by %+v", h.Path(), h.Info())
	}
	file := fa.file(o).Path
	st, err := Inspect(file, 0)
	if err != nil || st.State != StateHeld || st.Info.Token != h.Info().Token {
		t.Fatalf("lock file %+v, %v", st, err)
	}
	if err := h.RecordChild(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if st, _ := Inspect(file, 0); st.Info == nil || st.Info.ChildPGID != os.Getpid() {
		t.Errorf("childPgid not recorded: %+v", st.Info)
	}
	// Inspect through the helper sees the same holder.
	st, err = Etcd.Inspect(o)
	info := h.Info()
	if err != nil || st.State != StateHeld || st.Holder() != info.Holder() {
		t.Fatalf("Inspect: %+v, %v", st, err)
	}
	// Contention through the helper is (nil, false, nil).
	if _, ok, err := Etcd.TryAcquire(o); ok || err != nil {
		t.Fatalf("TryAcquire while held: %v, %v", ok, err)
	}
	// Clear without force names the holder and wraps ErrHeld.
	if _, err := Etcd.Clear(o, false); !errors.Is(err, ErrHeld) {
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
	for _, want := range []string{"acquired GPU lock", "released GPU lock"} {
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
	holder, err := Acquire(context.Background(), fa.file(Options{Path: agentURL, Owner: "reels", Slug: "tts"}))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()

	var logs testlog.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = Etcd.Acquire(ctx, Options{Path: agentURL, Owner: "ci", Slug: "smoke", Report: 50 * time.Millisecond, Logger: testlog.Logger(&logs)})
	var werr *WaitError
	if !errors.As(err, &werr) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v, want a *WaitError wrapping DeadlineExceeded", err)
	}
	if werr.Holder == nil || !strings.Contains(werr.Holder.Holder(), "reels/tts") {
		t.Errorf("WaitError names %v, want reels/tts", werr.Holder)
	}
	if !strings.Contains(logs.String(), "waiting for GPU lock: held by reels/tts") || !strings.Contains(logs.String(), "(position 1 in queue)") {
		t.Errorf("no waiting line naming the holder and position:\n%s", logs.String())
	}
	if q, _ := readQueue(fa.file(Options{Path: agentURL}).Path, nil); len(q) != 0 {
		t.Errorf("queue left behind: %+v", q)
	}
}

func TestAgentDeathLosesTheLock(t *testing.T) {
	kill := inProcessAgent(t, fileAs{t.TempDir()})
	var logs testlog.Buffer
	h, err := Etcd.Acquire(context.Background(), Options{Path: agentURL, Logger: testlog.Logger(&logs)})
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
	h, err := Etcd.Acquire(context.Background(), Options{Path: agentURL})
	if err != nil {
		t.Fatal(err)
	}
	h.(*agentHeld).c.close() // EOF on the helper's input, no release request
	if _, err := os.Stat(fa.file(Options{Path: agentURL}).Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file left after its user went away: %v", err)
	}
}

func TestAgentRefusesBadPathsWithoutAHelper(t *testing.T) {
	old := startAgent
	t.Cleanup(func() { startAgent = old })
	startAgent = func(hclog.Logger) (*agentConn, error) {
		t.Fatal("a helper was started for a bad path")
		return nil, nil
	}
	for _, p := range []string{"etcd://127.0.0.1:2379", "etcd://127.0.0.1:2379/", "etcd://user:pw@h:1/k", "etcd://h/k", "etcd://h:1/k?ttl=1s", "etcd://h:1/k?bogus=1"} {
		if _, err := Etcd.Acquire(context.Background(), Options{Path: p}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Acquire(%q): %v, want ErrInvalid", p, err)
		}
	}
}

func TestFileFunctionsRefuseEtcdPaths(t *testing.T) {
	if _, err := Acquire(context.Background(), Options{Path: agentURL}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Acquire: %v", err)
	}
	if _, err := Inspect(agentURL, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Inspect: %v", err)
	}
	if BackendFor(agentURL) != Etcd || BackendFor("/tmp/gpu.lock") != Files || BackendFor("ETCD://h:1/k") != Etcd {
		t.Error("BackendFor picks the wrong backend")
	}
}

func TestParseEtcdURL(t *testing.T) {
	u, err := ParseEtcdURL("etcd://10.0.0.1:2379,10.0.0.2:2379,[::1]:2379/gpuexec/render-box/?ttl=30s&dial-timeout=2s&cacert=/ca.pem&cert=/c.pem&key=/k.pem&user=gx&password-file=/pw")
	if err != nil {
		t.Fatal(err)
	}
	want := EtcdURL{
		Endpoints: []string{"10.0.0.1:2379", "10.0.0.2:2379", "[::1]:2379"}, Key: "/gpuexec/render-box",
		TTL: 30 * time.Second, DialTimeout: 2 * time.Second, CACert: "/ca.pem", Cert: "/c.pem", CertKey: "/k.pem",
		User: "gx", PasswordFile: "/pw",
	}
	if strings.Join(u.Endpoints, " ") != strings.Join(want.Endpoints, " ") || u.Key != want.Key || u.TTL != want.TTL ||
		u.DialTimeout != want.DialTimeout || u.CACert != want.CACert || u.Cert != want.Cert || u.CertKey != want.CertKey ||
		u.User != want.User || u.PasswordFile != want.PasswordFile || !u.TLS() {
		t.Errorf("got %+v\nwant %+v", *u, want)
	}
	u, err = ParseEtcdURL("etcd://h:2379/k")
	if err != nil || u.TTL != DefaultEtcdTTL || u.DialTimeout != DefaultEtcdDialTimeout || u.TLS() || u.Key != "/k" {
		t.Errorf("defaults: %+v, %v", u, err)
	}
	for _, bad := range []string{
		"etcd://h:2379", "etcd://h:2379/", "etcd://h:2379//", "etcd://h:2379/a//b", "etcd:///k", "etcd://h/k",
		"etcd://h:0/k", "etcd://h:99999/k", "etcd://u:p@h:1/k", "etcd://h:1/k#f", "etcd://h:1/k?ttl=1s",
		"etcd://h:1/k?ttl=2500ms", "etcd://h:1/k?ttl=x", "etcd://h:1/k?dial-timeout=-1s", "etcd://h:1/k?cert=/c",
		"etcd://h:1/k?password-file=/p", "etcd://h:1/k?ttl=2s&ttl=3s", "etcd://h:1/k?what=1", "/tmp/gpu.lock",
	} {
		if _, err := ParseEtcdURL(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseEtcdURL(%q): %v, want ErrInvalid", bad, err)
		}
	}
}
