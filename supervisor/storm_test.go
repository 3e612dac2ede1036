//go:build unix

package supervisor

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuexec/gpuexec/internal/testsupport"
	"github.com/gpuexec/gpuexec/lock"
	"github.com/gpuexec/gpuexec/signals"
)

var backstopOnce sync.Once

// backstop keeps SIGINT and SIGTERM caught for the rest of the test
// process: signals of a storm that arrive after Run stopped listening must
// not end it.
func backstop() {
	backstopOnce.Do(func() {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGTERM)
	})
}

// stormSelf sends 100 signals to this process, cycling through sigs: 50 at
// once, then 50 more 10 ms apart.
func stormSelf(t *testing.T, sigs []syscall.Signal) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := range 100 {
		if err := syscall.Kill(os.Getpid(), sigs[i%len(sigs)]); err != nil {
			t.Fatal(err)
		}
		if i >= 50 {
			<-tick.C
		}
	}
}

func tickets(t *testing.T, lockPath string) []string {
	t.Helper()
	m, err := filepath.Glob(lockPath + ".ticket-*")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSignalStormInProcess: 100 real SIGINT/SIGTERM within a second at a
// process running Run, through the signal handling gpuexec uses
// (signals.Notify), while Run waits for the lock and while it holds it: Run
// returns the documented status, releases the lock (or leaves the queue),
// and leaves no goroutine behind.
func TestSignalStormInProcess(t *testing.T) {
	backstop()
	kinds := []struct {
		name string
		sigs []syscall.Signal
		want []int
	}{
		{"SIGINT", []syscall.Signal{syscall.SIGINT}, []int{130}},
		{"SIGTERM", []syscall.Signal{syscall.SIGTERM}, []int{143}},
		{"both", []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}, []int{130, 143}},
	}
	for _, k := range kinds {
		t.Run("waiting/"+k.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			cfg, logs := testConfig(t, "true")
			cfg.Wait = time.Minute
			holder, err := lock.TryAcquire(cfg.Lock)
			if err != nil {
				t.Fatalf("taking the lock first: %v", err)
			}
			token := holder.Info().Token
			sigs, stop := signals.Notify()
			cfg.Signals = sigs
			code := make(chan int, 1)
			go func() { code <- Run(context.Background(), cfg) }()
			testsupport.Await(t, 20*time.Second, "Run to queue", func() bool { return len(tickets(t, cfg.Lock.Path)) > 0 })
			stormSelf(t, k.sigs)
			got := <-code
			stop()
			if !slices.Contains(k.want, got) {
				t.Errorf("Run = %d, want one of %v\n%s", got, k.want, logs)
			}
			if strings.Contains(logs.String(), "job started") {
				t.Errorf("the job ran:\n%s", logs)
			}
			if l := tickets(t, cfg.Lock.Path); len(l) > 0 {
				t.Errorf("tickets left: %v", l)
			}
			r, err := lock.Inspect(cfg.Lock)
			if err != nil || r.Locks[0].Info == nil || r.Locks[0].Info.Token != token {
				t.Errorf("the holder's lock changed: %+v, %v", r, err)
			}
			if err := holder.Release(); err != nil {
				t.Fatal(err)
			}
		})
		for _, ignoring := range []bool{false, true} {
			name := "holding/" + k.name
			script := `echo > "$READY"; exec sleep 60`
			want := k.want
			if ignoring {
				name += "/job ignores them"
				script = `trap '' INT TERM; echo > "$READY"; while :; do sleep 0.05; done`
				want = []int{128 + int(syscall.SIGKILL)}
			}
			t.Run(name, func(t *testing.T) {
				defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
				ready := filepath.Join(t.TempDir(), "ready")
				cfg, logs := testConfig(t, "sh", "-c", script)
				cfg.Env = append(os.Environ(), "READY="+ready)
				cfg.KillAfter = 300 * time.Millisecond
				sigs, stop := signals.Notify()
				cfg.Signals = sigs
				code := make(chan int, 1)
				go func() { code <- Run(context.Background(), cfg) }()
				testsupport.Await(t, 20*time.Second, "the job to run", func() bool {
					_, err := os.Stat(ready)
					return err == nil
				})
				began := time.Now()
				stormSelf(t, k.sigs)
				got := <-code
				took := time.Since(began)
				stop()
				if !slices.Contains(want, got) {
					t.Errorf("Run = %d, want one of %v\n%s", got, want, logs)
				}
				if ignoring && took < cfg.KillAfter {
					t.Errorf("a job ignoring the signals was killed after %s, before --kill-after (%s)", took, cfg.KillAfter)
				}
				if _, err := os.Lstat(cfg.Lock.Path); err == nil {
					t.Errorf("the lock is still there after Run returned")
				}
				if !strings.Contains(logs.String(), "releasing GPU lock") {
					t.Errorf("no release logged:\n%s", logs)
				}
			})
		}
	}
}
