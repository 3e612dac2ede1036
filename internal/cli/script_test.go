//go:build !windows

package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// TestScripts runs the scripts in testdata/script: the CLI's cases that are
// input and output alone (exit statuses, flag errors, help, version,
// completion, status and clear of hand-written locks), each a few lines of
// gpuexec command lines and what they print. Timing, concurrency and
// terminal cases are Go tests.
//
// Each script runs in a folder of its own, $WORK, with:
//
//   - gpuexec, the real binary TestMain built (as a user builds it), first
//     on PATH; $gpuexecdir is its folder (alone there, so that
//     PATH=$gpuexecdir leaves a job no command to find, except under
//     Wine, where winetest/run's folder also holds the test binaries);
//   - HOME=$WORK, TMPDIR=$WORK/tmp (where a gpuexec without --lock would
//     take its lock), TZ=UTC, and no GPUEXEC_* variable of the test's own;
//   - $LIVEPID, the pid of this test process (a holder that is alive
//     throughout), and $DEADPID, that of a process that has exited;
//
// and these commands beside testscript's own:
//
//	exits CODE PROGRAM [ARG...]   run PROGRAM, which must exit with CODE
//	expand FILE...                replace $VAR and ${VAR} in each FILE by its value
//	backdate AGE FILE...          set each FILE's mtime AGE (a Go duration) ago; 0s: now
//
// Every script passes --lock with a path under $WORK: none touches the
// machine's default lock.
func TestScripts(t *testing.T) {
	t.Parallel()
	bin := gpuexecBin
	dead := testsupport.DeadPID(t)
	// $WORK with its links resolved, as status prints the lock's path.
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:                filepath.Join("testdata", "script"),
		WorkdirRoot:        root,
		RequireUniqueNames: true,
		Setup: func(e *testscript.Env) error {
			tmp := filepath.Join(e.WorkDir, "tmp")
			if err := os.Mkdir(tmp, 0o700); err != nil {
				return err
			}
			e.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+e.Getenv("PATH"))
			e.Setenv("gpuexecdir", filepath.Dir(bin))
			e.Setenv("HOME", e.WorkDir)
			e.Setenv("TMPDIR", tmp)
			e.Setenv("TZ", "UTC") // status prints its times in local time
			e.Setenv("GORACE", strings.TrimSpace(e.Getenv("GORACE")+" atexit_sleep_ms=0"))
			e.Setenv("LIVEPID", strconv.Itoa(os.Getpid()))
			e.Setenv("DEADPID", strconv.Itoa(dead))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":    cmdExits,
			"expand":   cmdExpand,
			"backdate": cmdBackdate,
		},
	})
}

// cmdExits is "exits CODE PROGRAM [ARG...]": PROGRAM must exit with CODE
// (0 too); its stdout and stderr are then those the stdout, stderr and cmp
// commands read.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("exits takes no !: name the status")
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exits CODE PROGRAM [ARG...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: CODE %q is not a number", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	if err != nil {
		ee, ok := err.(interface{ ExitCode() int })
		if !ok {
			ts.Fatalf("exits: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("exit status %d (%v), want %d", got, err, want)
	}
}

// cmdExpand is "expand FILE...": each FILE's $VAR and ${VAR} are replaced
// by the variables' values (a record naming $LIVEPID, say).
func cmdExpand(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: expand FILE...")
	}
	for _, f := range args {
		path := ts.MkAbs(f)
		b, err := os.ReadFile(path)
		ts.Check(err)
		ts.Check(os.WriteFile(path, []byte(os.Expand(string(b), ts.Getenv)), 0o644))
	}
}

// cmdBackdate is "backdate AGE FILE...": each FILE's mtime (a lock's
// heartbeat) is set AGE ago.
func cmdBackdate(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: backdate AGE FILE...")
	}
	age, err := time.ParseDuration(args[0])
	if err != nil {
		ts.Fatalf("backdate: %v", err)
	}
	mt := time.Now().Add(-age)
	for _, f := range args[1:] {
		ts.Check(os.Chtimes(ts.MkAbs(f), mt, mt))
	}
}
