//go:build unix

package cli

// Two peers' own test suites, ported: coreutils' tests/timeout/ (timeout(1))
// and util-linux's tests/ts/flock/ (flock(1)), read upstream and adapted to
// gpuexec's documented conventions: flags instead of operands (--timeout
// DURATION in Go's units, --wait for flock's --timeout), 124 after
// --timeout whatever --signal (timeout(1) gives 128+9 once it has sent
// KILL), 75 for a lock not had (flock's --conflict-exit-code), the job in a
// process group of its own. Each case names the upstream file and the check
// it adapts; nothing is copied. Every run is on a lock of its own, in a
// folder of its own that is also the job's working folder and TMPDIR.
//
// Not ported, for gpuexec has no such thing: timeout's --preserve-status
// and --foreground, and flock's --no-fork, --fcntl (and fcntl-vs-flock),
// locking a descriptor (--fd, the fd subtest, unlock's --unlock) and byte
// ranges (range-lock's --start/--length: only its lslocks check is).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// portedCase is one upstream check, as a run of gpuexec.
type portedCase struct {
	name string
	// args follow "gpuexec --lock LOCK".
	args []string
	// via starts gpuexec, its path and args appended: a parent that
	// ignores or blocks a signal, has a child already, or is init.
	via []string
	// setup prepares the case's folder, or skips the case.
	setup func(t *testing.T, dir string)
	// held: a gpuexec holds the lock when the run starts; release: the
	// holder's job ends once the run has queued (or exited).
	held, release bool
	// shared: the lock is held by a --share job on a fake 24 GiB card,
	// which the run sees too.
	shared bool
	// signals are sent in order to gpuexec (the started process) once its
	// job has made the file "running" in the case's folder.
	signals []syscall.Signal

	want      int
	stdout    string   // all of stdout, unless stdoutAny
	stdoutAny bool     // stdout is check's to judge
	stderr    []string // in stderr
	notStderr []string // not in stderr
	oneLine   bool     // stderr is one line: a refusal
	made      []string // files the job made in the case's folder
	notMade   []string // files it did not
	check     func(t *testing.T, c *portedRun, r result)
}

// portedRun is where a case runs.
type portedRun struct {
	dir, lock string
	holder    *holder
	sharer    *sharedJob
	card      *card
}

// viaSh is a sh -c line that starts gpuexec as "$0" "$@".
func viaSh(line string) []string { return []string{"/bin/sh", "-c", line} }

// signalJob notes each INT, HUP and TERM it gets in a file (int.received,
// hup.received, term.received) and exits 3 on INT or HUP, 4 on TERM; it
// says it runs with the file running, and ends by itself after about 20 s.
const signalJob = `trap 'touch int.received; exit 3' INT
trap 'touch hup.received; exit 3' HUP
trap 'touch term.received; exit 4' TERM
touch running
i=0; while [ $i -lt 400 ]; do sleep .05; i=$((i+1)); done`

func runPorted(t *testing.T, cases []portedCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, lock := lockIn(t)
			c := &portedRun{dir: t.TempDir(), lock: lock}
			if tc.setup != nil {
				tc.setup(t, c.dir)
			}
			var env []string
			switch {
			case tc.shared:
				c.card = newCard(t, rtx4090(500))
				env = c.card.env()
				c.sharer = startShared(t, c.card, lock, "--share", "--vram", "1G", "--slug", "sharer")
				awaitStarted(t, c.sharer)
			case tc.held:
				c.holder = startHolder(t, lock)
			}
			argv := append(append(append([]string(nil), tc.via...), gpuexecBin, "--lock", lock), tc.args...)
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = c.dir
			cmd.Env = testsupport.Env(append(env, "TMPDIR="+c.dir)...)
			p := startProc(t, cmd)
			if tc.release {
				testsupport.Await(t, long, "gpuexec to queue", func() bool { return p.exited() || queueLen(t, lock) == 1 })
				if out := p.stdout(); out != "" {
					t.Errorf("the job ran while the lock was held: %q", out)
				}
				c.holder.release()
			}
			if tc.signals != nil {
				testsupport.Await(t, long, "the job to run", func() bool { return p.exited() || lockExists(filepath.Join(c.dir, "running")) })
				for _, sig := range tc.signals {
					if err := syscall.Kill(p.pid(), sig); err != nil && !p.exited() {
						t.Fatal(err)
					}
				}
			}
			r := p.wait(t)
			wantCode(t, r, tc.want)
			if !tc.stdoutAny && r.stdout != tc.stdout {
				t.Errorf("stdout %q, want %q", r.stdout, tc.stdout)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
				}
			}
			for _, s := range tc.notStderr {
				if strings.Contains(r.stderr, s) {
					t.Errorf("stderr has %q:\n%s", s, r.stderr)
				}
			}
			if lines := strings.Count(strings.TrimSuffix(r.stderr, "\n"), "\n") + 1; tc.oneLine && lines != 1 {
				t.Errorf("stderr is %d lines, not one:\n%s", lines, r.stderr)
			}
			for _, f := range tc.made {
				if !lockExists(filepath.Join(c.dir, f)) {
					t.Errorf("the job did not make %s", f)
				}
			}
			for _, f := range tc.notMade {
				if lockExists(filepath.Join(c.dir, f)) {
					t.Errorf("the job made %s", f)
				}
			}
			if tc.check != nil {
				tc.check(t, c, r)
			}
			if c.sharer != nil {
				wantCode(t, c.sharer.end(t), 0)
			}
			if c.holder == nil && c.sharer == nil {
				wantNoLock(t, lock)
			}
		})
	}
}

func TestCoreutilsTimeoutCases(t *testing.T) {
	t.Parallel()
	runPorted(t, []portedCase{
		// coreutils tests/timeout/timeout.sh, "no timeout": a command that
		// ends within its limit exits 0.
		{name: "no timeout", args: []string{"--timeout", "10s", "--", "true"}},
		// timeout.sh, "no timeout (suffix check)": a limit with a unit (1d
		// there; gpuexec's largest unit is h).
		{name: "suffix", args: []string{"--timeout", "24h", "--", "true"}},
		// timeout.sh's suffix check, the other way: gpuexec has no d (its
		// --help says so), and says so in one line.
		{name: "suffix d is refused", args: []string{"--timeout", "1d", "--", "true"}, want: 125, oneLine: true, stderr: []string{"--timeout"}},
		// timeout.sh, "disabled timeout": 0 is no limit.
		{name: "disabled timeout", args: []string{"--timeout", "0", "--", "true"}},
		// timeout.sh, "exit status propagation".
		{name: "exit status propagation", args: []string{"--", "sh", "-c", "exit 2"}, want: 2},
		// timeout.sh, "timeout": a command past its limit is stopped, 124.
		{name: "timeout", args: []string{"--timeout", "100ms", "--", "sleep", "10"}, want: 124},
		// timeout.sh, "kill delay": the first signal does nothing (-s0
		// there, which sends none; gpuexec refuses a signal that cannot end
		// a job, so USR1 to a job that ignores it) and KILL follows
		// --kill-after later. timeout(1) then exits 128+9; gpuexec
		// documents 124 whatever ended the job.
		{name: "kill delay", args: []string{"--timeout", "100ms", "--signal", "USR1", "--kill-after", "1s", "--", "sh", "-c", `trap "" USR1; sleep 10`},
			want: 124, stderr: []string{"killing its process group"}},
		// timeout.sh, the same with -k 0 (the brief: 0 is SIGKILL at once,
		// with the first signal): a job that ignores TERM is killed at once.
		{name: "kill delay 0 kills at once", args: []string{"--timeout", "100ms", "--kill-after", "0", "--", "sh", "-c", `trap "" TERM; sleep 30; touch survived`},
			want: 124, stderr: []string{"killing its process group"}, notMade: []string{"survived"}},
		// timeout.sh's note on the kill delay, "once the initial timeout
		// triggers, the exit status will be 124 even if the command exits
		// on its own accord", with timeout(1)'s default of no KILL, spelt
		// --kill-after never: only the first signal is sent, and a job
		// that ignores it runs to its end.
		{name: "kill delay never", args: []string{"--timeout", "100ms", "--kill-after", "never", "--", "sh", "-c", `trap "" TERM; sleep 1; touch finished`},
			want: 124, made: []string{"finished"}, notStderr: []string{"killing its process group"}},
		// timeout.sh, "immune to parent's SIGCHLD handler": started with
		// SIGCHLD ignored, gpuexec still sees its job end.
		{name: "parent ignores SIGCHLD", via: viaSh(`trap '' CHLD; exec "$0" "$@"`), args: []string{"--timeout", "10s", "--", "true"}},
		// timeout.sh, "Don't be confused when starting off with a child
		// (Bug#9098)": gpuexec inherits a child it did not start, and
		// still stops its job at the limit, before it prints.
		{name: "starting off with a child", via: viaSh(`sleep 1 & exec "$0" "$@"`),
			args: []string{"--timeout", "500ms", "--", "sh", "-c", "sleep 10; echo foo"}, want: 124},
		// timeout.sh, "Verify --verbose output": gpuexec's log names the
		// first signal it sends and the KILL that follows.
		{name: "verbose output", args: []string{"--timeout", "100ms", "--signal", "USR1", "--kill-after", "100ms", "--", "sh", "-c", `trap "" USR1; sleep 10`},
			want: 124, stderr: []string{"job reached --timeout", "signal=SIGUSR1", "killing its process group"}},

		// coreutils tests/timeout/timeout-parameters.sh: "internal errors
		// are 125, distinct from execution failure", each in one line.
		{name: "invalid timeout", args: []string{"--timeout", "invalid", "--", "sleep", "0"}, want: 125, oneLine: true, stderr: []string{"--timeout"}},
		// timeout-parameters.sh, "invalid timeouts": ' -0.1'.
		{name: "negative timeout", args: []string{"--timeout", "-0.1s", "--", "sleep", "0"}, want: 125, oneLine: true, stderr: []string{"--timeout"}},
		// timeout-parameters.sh, "invalid timeouts": ' -1e-10000', a
		// negative below a nanosecond (Go's parser truncates it to 0).
		{name: "negative timeout below a nanosecond", args: []string{"--timeout", "-0.0000000001s", "--", "sleep", "0"}, want: 125, oneLine: true, stderr: []string{"--timeout"}},
		// timeout-parameters.sh, "invalid kill delay".
		{name: "invalid kill delay", args: []string{"--kill-after", "invalid", "--", "sleep", "0"}, want: 125, oneLine: true, stderr: []string{"--kill-after"}},
		// timeout-parameters.sh, "invalid timeout suffix": 42D.
		{name: "invalid timeout suffix", args: []string{"--timeout", "42D", "--", "sleep", "0"}, want: 125, oneLine: true, stderr: []string{"--timeout"}},
		// timeout-parameters.sh, "floating point notation": 10.34.
		{name: "floating point", args: []string{"--timeout", "10.34s", "--", "sleep", "0"}},
		// timeout-parameters.sh, "nanoseconds potentially supported".
		{name: "nanoseconds", args: []string{"--timeout", "9.999999999s", "--", "sleep", "0"}},
		// timeout-parameters.sh, "round underflow up to 1 ns" (coreutils
		// bug#77535): a positive limit below a nanosecond is 1 ns, never
		// none.
		{name: "underflow rounds up to 1ns", args: []string{"--timeout", "0.0000000001s", "--", "sleep", "10"}, want: 124},
		// timeout-parameters.sh, "invalid signal spec".
		{name: "invalid signal", args: []string{"--signal", "invalid", "--", "sleep", "0"}, want: 125, oneLine: true, stderr: []string{"--signal"}},
		// timeout-parameters.sh, "invalid command": `timeout 10 .` is 126,
		// as `env .` is: found, not executable.
		{name: "invalid command", args: []string{"--", "."}, want: 126},
		// timeout-parameters.sh's "invalid command", found on PATH: a file
		// without x in a PATH folder is 126 for execvp, env(1) and sh.
		{name: "not executable on PATH", via: viaSh(`PATH="$PWD/bin:$PATH" exec "$0" "$@"`), args: []string{"--", "notexec"}, want: 126,
			setup: func(t *testing.T, dir string) {
				if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "bin", "notexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}},
		// timeout-parameters.sh, "no such command".
		{name: "no such command", args: []string{"--", "no_such"}, want: 127},

		// coreutils tests/timeout/timeout-large-parameters.sh: a limit
		// past time_t's reach does not fire at once.
		{name: "largest timeout does not fire at once", args: []string{"--timeout", "2562047h", "--", "sleep", "1"}},
		// timeout-large-parameters.sh, "timeout overflow": UINT_MAX+1 s.
		{name: "timeout past 32 bits", args: []string{"--timeout", "4294967296s", "--", "sleep", "0"}},
		// timeout-large-parameters.sh, "floating point notation" 2.34e+5
		// (days there; Go writes no exponent, so 234000h).
		{name: "large timeout", args: []string{"--timeout", "234000h", "--", "sleep", "0"}},
		// timeout-large-parameters.sh, "timeout overflow" ${TIME_T_OFLOW}d:
		// timeout(1) clamps; gpuexec's durations end at Go's (2562047h), and
		// past it gpuexec refuses in one line rather than run without the
		// limit asked for.
		{name: "timeout past the largest duration", args: []string{"--timeout", "10000000h", "--", "sleep", "0"}, want: 125, oneLine: true, stderr: []string{"--timeout"}},
		// timeout-large-parameters.sh, -$LDBL_MAX: a negative past the
		// largest duration.
		{name: "large negative timeout", args: []string{"--timeout", "-10000000h", "--", "sleep", "0"}, want: 125, oneLine: true, stderr: []string{"--timeout"}},
		// timeout-large-parameters.sh, "Ensure underflow times out
		// immediately": 1e-5000.
		{name: "underflow times out", args: []string{"--timeout", "0.000000000000000000001s", "--", "sleep", "10"}, want: 124},

		// coreutils tests/timeout/timeout-group.sh, "simulate a Ctrl-C to
		// the group": the job (in a group of its own) hears a Ctrl+C that
		// reaches gpuexec, and its status is passed on.
		{name: "Ctrl+C reaches the job", args: []string{"--", "sh", "-c", signalJob}, signals: []syscall.Signal{syscall.SIGINT},
			want: 3, made: []string{"int.received"}},
		// timeout-group.sh's group.sh starts the command with SIGINT
		// ignored (trap '' INT; ... &): an ignored SIGINT stays ignored for
		// the job, as for timeout(1) and shells, and does not end gpuexec;
		// the SIGTERM after it does reach the job.
		{name: "ignored SIGINT stays ignored", via: viaSh(`trap '' INT; exec "$0" "$@"`), args: []string{"--", "sh", "-c", signalJob},
			signals: []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}, want: 4, made: []string{"term.received"}, notMade: []string{"int.received"}},
		// timeout-group.sh's ignored SIGINT, as nohup(1) leaves SIGHUP.
		{name: "ignored SIGHUP stays ignored", via: viaSh(`trap '' HUP; exec "$0" "$@"`), args: []string{"--", "sh", "-c", signalJob},
			signals: []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM}, want: 4, made: []string{"term.received"}, notMade: []string{"hup.received"}},
		// timeout-group.sh, "Ensure cascaded timeouts work ... commands
		// that create their own group": a gpuexec whose job is another
		// gpuexec (a group of its own, and its job another) passes a
		// signal down to the last job, and its status back up.
		{name: "cascaded", signals: []syscall.Signal{syscall.SIGTERM}, want: 4, made: []string{"term.received"},
			args: []string{"--", gpuexecBin, "--lock", "inner/gpu.lock", "--timeout", "25s", "--", "sh", "-c", signalJob}},

		// coreutils tests/timeout/timeout-blocked.pl, "block-alrm": started
		// with signals blocked by its parent (ALRM there; CHLD too here),
		// gpuexec still stops the job at its limit.
		{name: "blocked signals", want: 124, args: []string{"--timeout", "100ms", "--", "sleep", "10"},
			via:   []string{"python3", "-c", "import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGCHLD}); os.execv(sys.argv[1], sys.argv[1:])"},
			setup: func(t *testing.T, dir string) { needTool(t, "python3") }},

		// coreutils tests/timeout/init-parent.sh: gpuexec as pid 1 (a
		// container's entrypoint) runs and stops its job as anywhere.
		{name: "init parent", via: newPIDs, setup: needNewPIDs, args: []string{"--timeout", "10s", "--", "sleep", "0.2"}},
		{name: "init parent times out", via: newPIDs, setup: needNewPIDs, args: []string{"--timeout", "100ms", "--", "sleep", "10"}, want: 124},
	})
}

// newPIDs starts gpuexec as pid 1 of a new pid namespace, as
// init-parent.sh does.
var newPIDs = []string{"unshare", "--pid", "--fork", "--map-root-user"}

func needNewPIDs(t *testing.T, dir string) {
	if out, err := exec.Command(newPIDs[0], append(newPIDs[1:], "true")...).CombinedOutput(); err != nil {
		t.Skipf("unshare --pid --fork --map-root-user is unavailable: %v %s", err, out)
	}
}

func TestUtilLinuxFlockCases(t *testing.T) {
	t.Parallel()
	runPorted(t, []portedCase{
		// util-linux tests/ts/flock/flock, "non-block" (--nonblock
		// --conflict-exit-code 123): the lock held, --wait 0 gives up at
		// once with gpuexec's 75, and the command does not run.
		{name: "non-block", held: true, args: []string{"--wait", "0", "--", "echo", "You will never see this!"}, want: 75},
		// flock, "shared": a shared lock beside a shared holder runs at
		// once (--share beside a --share job, on a fake card).
		{name: "shared", shared: true, args: []string{"--share", "--vram", "1G", "--wait", "0", "--", "echo", "Have shared lock"}, stdout: "Have shared lock\n"},
		// flock, "exclusive": an exclusive lock beside a shared holder
		// gives up (a whole-card job beside a --share job).
		{name: "exclusive", shared: true, args: []string{"--wait", "0", "--", "echo", "You will never see this!"}, want: 75},
		// flock, "timeout" and "time-check": a blocking lock with a bound
		// (--timeout 5) waits for the holder and runs once it has let go,
		// not before.
		{name: "timeout", held: true, release: true, args: []string{"--wait", "1m", "--poll", "100ms", "--", "echo", "After timeout."}, stdout: "After timeout.\n"},
		// flock, the same without a bound: flock(1) waits forever unless
		// told otherwise; gpuexec's spelling is --wait forever.
		{name: "wait forever", held: true, release: true, args: []string{"--wait", "forever", "--poll", "100ms", "--", "echo", "After timeout."}, stdout: "After timeout.\n"},
		// The same with sleep(1)'s spelling, inf.
		{name: "wait inf", held: true, release: true, args: []string{"--wait", "inf", "--poll", "100ms", "--", "echo", "After timeout."}, stdout: "After timeout.\n"},

		// util-linux tests/ts/flock/unlock, "A timeout of 0 should be
		// interpreted as --nonblock", with --verbose: on a free lock
		// --wait 0 takes it, runs the command, and says it got the lock.
		{name: "wait 0 on a free lock", args: []string{"--wait", "0", "--", "true"}, stderr: []string{"acquired GPU lock"}},

		// util-linux tests/ts/flock/close (--close): the command does not
		// inherit a descriptor of the lock. gpuexec passes on one thing
		// on purpose, its liveness files (gpu.lock.live-*: the lock stays
		// live while the job does, even if gpuexec is killed); never the
		// lock file, its guard or a ticket.
		{name: "close", stdoutAny: true, args: []string{"--", "sh", "-c", `for f in /proc/$$/fd/*; do readlink "$f"; done; exit 0`},
			setup: func(t *testing.T, dir string) {
				if _, err := os.Stat("/proc/self/fd"); err != nil {
					t.Skip("no /proc/self/fd here")
				}
			},
			check: func(t *testing.T, c *portedRun, r result) {
				for _, target := range strings.Fields(r.stdout) {
					if name, ok := strings.CutPrefix(target, filepath.Dir(c.lock)+"/"); ok && !strings.HasPrefix(name, "gpu.lock.live-") {
						t.Errorf("the job has a descriptor of %s", target)
					}
				}
			}},
		// util-linux tests/ts/flock/range-lock, its lslocks check: who
		// holds the lock is shown with the holder's pid (status here).
		{name: "holder shown", held: true, stdoutAny: true, args: []string{"status"},
			check: func(t *testing.T, c *portedRun, r result) {
				if want := fmt.Sprintf("held by %s/%s (pid %d)", holderOwner, holderSlug, c.holder.p.pid()); !strings.Contains(r.stdout, want) {
					t.Errorf("status lacks %q:\n%s", want, r.stdout)
				}
			}},
	})
}
