//go:build unix

package supervisor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
	"github.com/gpuexec/gpuexec/lock"
)

func TestExitStatuses(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		timeout time.Duration
		want    int
	}{
		{"success", "exit 0", 0, 0},
		{"child's own code", "exit 3", 0, 3},
		{"killed by a signal", "kill -USR1 $$", 0, 128 + int(syscall.SIGUSR1)},
		{"killed by SIGKILL", "kill -KILL $$", 0, 137},
		{"timeout", "sleep 30", 100 * time.Millisecond, ExitTimeout},
		{"timeout, TERM ignored", "trap '' TERM; sleep 30 & wait; sleep 30", 100 * time.Millisecond, ExitTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, logs := testConfig(t, "sh", "-c", tt.script)
			cfg.Timeout = tt.timeout
			cfg.KillAfter = 200 * time.Millisecond
			if code := Run(context.Background(), cfg); code != tt.want {
				t.Fatalf("Run = %d, want %d\n%s", code, tt.want, logs)
			}
			if _, err := os.Stat(cfg.Lock.Path); !os.IsNotExist(err) {
				t.Fatalf("lock left after Run: %v", err)
			}
		})
	}
}

func TestChildIsGroupLeaderAndSeesLock(t *testing.T) {
	cfg, logs := testConfig(t, "sh", "-c", `echo "$$ $(ps -o pgid= -p $$) $GPUEXEC_LOCK_HELD $GPUEXEC_LOCK_PATH"`)
	var out bytes.Buffer
	cfg.Stdout = &out
	if code := Run(context.Background(), cfg); code != 0 {
		t.Fatalf("Run = %d\n%s", code, logs)
	}
	f := strings.Fields(out.String())
	if len(f) != 4 {
		t.Fatalf("child printed %q", out.String())
	}
	if f[0] != f[1] {
		t.Fatalf("child pid %s is not its group leader (pgid %s)", f[0], f[1])
	}
	if f[1] == strconv.Itoa(syscall.Getpgrp()) {
		t.Fatal("child shares gpuexec's process group")
	}
	if f[2] != "1" || f[3] != cfg.Lock.Path {
		t.Fatalf("child env: held=%s lock=%s", f[2], f[3])
	}
}

func TestSignalForwardedToGroup(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	mark := filepath.Join(dir, "mark")
	script := `trap 'echo term > ` + mark + `; exit 7' TERM; echo > ` + ready + `; while :; do sleep 0.01; done`
	cfg, logs := testConfig(t, "sh", "-c", script)
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	go func() {
		if !testsupport.Poll(20*time.Second, func() bool {
			_, err := os.Stat(ready)
			return err == nil
		}) {
			t.Errorf("%s did not appear", ready)
		}
		sigs <- syscall.SIGTERM
	}()
	if code := Run(context.Background(), cfg); code != 7 {
		t.Fatalf("Run = %d, want the child's 7\n%s", code, logs)
	}
	if b, _ := os.ReadFile(mark); strings.TrimSpace(string(b)) != "term" {
		t.Fatalf("child did not get SIGTERM: %q", b)
	}
	if !strings.Contains(logs.String(), "forwarding signal") {
		t.Fatalf("forwarding not logged:\n%s", logs)
	}
}

func TestLeftoversStoppedBeforeRelease(t *testing.T) {
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "pid")
	cfg, logs := testConfig(t, "sh", "-c", "sleep 300 & echo $! > "+pidfile+"; exit 0")
	if code := Run(context.Background(), cfg); code != 0 {
		t.Fatalf("Run = %d\n%s", code, logs)
	}
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatalf("bad pid %q", b)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("leftover %d still exists after Run returned (kill: %v)", pid, err)
	}
	if !strings.Contains(logs.String(), "left processes behind") {
		t.Fatalf("leftovers not logged:\n%s", logs)
	}
}

func TestSignalWhileWaiting(t *testing.T) {
	cfg, _ := testConfig(t, "true")
	held, code, _ := acquire(context.Background(), cfg)
	if held == nil {
		t.Fatalf("acquire = %d", code)
	}
	defer held.Release()
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	sigs <- syscall.SIGINT
	if code := Run(context.Background(), cfg); code != 130 {
		t.Fatalf("Run interrupted while waiting = %d, want 130", code)
	}
}

// The record names the job's process group once the job has run for
// recordChildAfter, through the real lock.
func TestRecordNamesTheJobsGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	cfg, logs := testConfig(t, "sh", "-c", `echo $$ > "$0"; read x; exit 0`, pidFile)
	in, feed, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cfg.Stdin = in
	code := make(chan int, 1)
	go func() { code <- Run(context.Background(), cfg) }()
	status := -1
	finish := func() int {
		if status < 0 {
			feed.Close()
			status = <-code
		}
		return status
	}
	t.Cleanup(func() { finish() })

	testsupport.Await(t, 20*time.Second, "the record to name the job's group", func() bool {
		b, err := os.ReadFile(pidFile)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == 0 {
			return false
		}
		rec, err := os.ReadFile(cfg.Lock.Path)
		return err == nil && bytes.Contains(rec, []byte(`"childPgid":`+strconv.Itoa(pid)))
	})
	if c := finish(); c != 0 {
		t.Fatalf("Run = %d\n%s", c, logs)
	}
}

// Validate refuses a TimeoutSignal that does not end a job (gpuexec would
// follow it with SIGCONT), naming the option as the command does.
func TestValidateTimeoutSignal(t *testing.T) {
	for _, tt := range []struct {
		sig os.Signal
		ok  bool
	}{
		{nil, true},
		{syscall.SIGTERM, true},
		{syscall.SIGUSR1, true},
		{syscall.SIGKILL, true},
		{syscall.SIGTSTP, false},
		{syscall.SIGCONT, false},
	} {
		cfg, _ := testConfig(t, "true")
		cfg.TimeoutSignal = tt.sig
		err := cfg.Validate()
		var oe *lock.OptionError
		switch {
		case tt.ok && err != nil:
			t.Errorf("%v: %v", tt.sig, err)
		case !tt.ok && (!errors.As(err, &oe) || oe.Option != "signal"):
			t.Errorf("%v: Validate = %v, want an OptionError for signal", tt.sig, err)
		}
	}
}

// A bare name that PATH holds but that cannot be run is 126, as execvp(3)
// says (EACCES): not 127, which exec.LookPath alone would give.
func TestFindCommandOnPath(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	write := func(path string, mode os.FileMode) {
		if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(first, "notexec"), 0o644)
	write(filepath.Join(first, "later"), 0o644)
	write(filepath.Join(second, "later"), 0o755)
	if err := os.Mkdir(filepath.Join(first, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", first+string(os.PathListSeparator)+second)
	for _, tt := range []struct {
		name string
		want int
		err  string
	}{
		{"notexec", ExitCannotExec, "notexec: command found but not executable (" + filepath.Join(first, "notexec") + ")"},
		{"sub", ExitCannotExec, "sub: is a folder, not a command (" + filepath.Join(first, "sub") + ")"},
		{".", ExitCannotExec, ".: is a folder, not a command (" + first + ")"},
		{"..", ExitCannotExec, "..: is a folder, not a command"},
		{"later", 0, ""},
		{"missing", ExitNotFound, "missing: command not found"},
		{filepath.Join(first, "missing"), ExitNotFound, filepath.Join(first, "missing") + ": command not found"},
	} {
		path, code, err := findCommand(tt.name)
		if code != tt.want || (err == nil) != (tt.err == "") || err != nil && !strings.HasPrefix(err.Error(), tt.err) {
			t.Errorf("findCommand(%q) = %q, %d, %v; want %d, %q", tt.name, path, code, err, tt.want, tt.err)
		}
	}
}
