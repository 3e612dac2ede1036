package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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
//   - next on PATH, the programs of scriptTools (true, false, exitwith,
//     env), which Windows lacks, played by this test binary on every OS so
//     that a script runs alike everywhere;
//
// and these commands beside testscript's own:
//
//	exits CODE PROGRAM [ARG...]   run PROGRAM, which must exit with CODE
//	expand FILE...                replace $VAR and ${VAR} in each FILE by its value
//	backdate AGE FILE...          set each FILE's mtime AGE (a Go duration) ago; 0s: now
//	entries DIR                   print the names in DIR, one a line, sorted (ls -A)
//
// What needs sh, signals or Unix paths is guarded ([unix], [exec:sh]).
//
// Every script passes --lock with a path under $WORK: none touches the
// machine's default lock.
func TestScripts(t *testing.T) {
	t.Parallel()
	bin := gpuexecBin
	tools := t.TempDir()
	exe := "" // Windows finds a program by its name with .exe added
	if strings.HasSuffix(helperBin, ".exe") {
		exe = ".exe"
	}
	for name := range scriptTools {
		if err := placeTool(helperBin, filepath.Join(tools, name+exe)); err != nil {
			t.Fatal(err)
		}
	}
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
			e.Setenv("PATH", strings.Join([]string{filepath.Dir(bin), tools, e.Getenv("PATH")}, string(os.PathListSeparator)))
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
			"entries":  cmdEntries,
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
	// A program that could not be started at all never ran: Wine's
	// CreateProcess now and then fails ("fork/exec ...: Internal error")
	// when many processes start at once. Start it again, twice at most.
	for try := 0; try < 2 && err != nil && strings.HasPrefix(err.Error(), "fork/exec "); try++ {
		ts.Logf("exits: %v; starting it again", err)
		err = ts.Exec(args[1], args[2:]...)
	}
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

// cmdEntries is "entries DIR": the names in DIR, dot files too, one a line
// in sorted order, on stdout (as ls -A prints them, where no ls runs).
func cmdEntries(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: entries DIR")
	}
	ents, err := os.ReadDir(ts.MkAbs(args[0]))
	ts.Check(err)
	for _, e := range ents {
		fmt.Fprintln(ts.Stdout(), e.Name())
	}
}

// scriptTools are the programs a script's jobs run, played by this test
// binary when it is run by one of these names (see toolNamed): the same
// on every OS, Windows, which has none of them, included.
var scriptTools = map[string]func(args []string) int{
	"true":  func([]string) int { return 0 },
	"false": func([]string) int { return 1 },
	// exitwith CODE: exit with CODE.
	"exitwith": func(args []string) int {
		if len(args) != 1 {
			fmt.Fprintln(os.Stderr, "usage: exitwith CODE")
			return 2
		}
		return helperRoles["exit"](args)
	},
	// env [NAME=VALUE...] PROGRAM [ARG...]: run PROGRAM with these
	// variables set, and exit with its status, as env(1) does.
	"env": func(args []string) int {
		for len(args) > 0 && strings.Contains(args[0], "=") {
			k, v, _ := strings.Cut(args[0], "=")
			if err := os.Setenv(k, v); err != nil {
				fmt.Fprintln(os.Stderr, "env:", err)
				return 125
			}
			args = args[1:]
		}
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, "usage: env [NAME=VALUE...] PROGRAM [ARG...]")
			return 125
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee) && ee.ExitCode() >= 0:
			return ee.ExitCode()
		case errors.Is(err, exec.ErrNotFound):
			fmt.Fprintln(os.Stderr, "env:", err)
			return 127
		}
		fmt.Fprintln(os.Stderr, "env:", err)
		return 126
	},
}

// toolNamed is the script tool this process is run as (its argv[0]'s
// base name, less an .exe), or nil.
func toolNamed(argv0 string) func(args []string) int {
	return scriptTools[strings.TrimSuffix(filepath.Base(argv0), ".exe")]
}

// placeTool makes path a copy of the binary bin. A copy, not a hard link:
// Windows refuses to remove a link to the image of a running program (this
// test binary), and t.TempDir's cleanup would fail. Copied as a stream, not
// read whole: on Linux a process this one starts reports this one's peak
// memory as its own (Go starts it by vfork, and the peak is kept across
// exec), which TestEtcdHelperLineHasACap bounds at 100 MiB; four race test
// binaries read whole raised it past that.
func placeTool(bin, path string) (err error) {
	src, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = io.Copy(dst, src)
	return err
}
