package cli

// Strict words: a word of the command line that no command takes is one
// line and status 125, never ignored and never a run; a --lock shaped like
// a URL that is not etcd:// is refused before anything is made.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// wantRefused fails unless r is gpuexec's own failure: status 125, one
// line on stderr that has want, nothing on stdout.
func wantRefused(t *testing.T, r result, want string) {
	t.Helper()
	wantCode(t, r, 125)
	if l := lines(r.stderr); len(l) != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Errorf("stderr is %d lines, want exactly one:\n%s", len(l), r.stderr)
	}
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout: %q", r.stdout)
	}
}

// A word before "--" that is neither a flag, a flag's value nor a
// subcommand is refused, with every form of it: the parser stops at it and
// reads no flag after it, so running would drop them. So is a "--" given to
// a command that runs no job, and a word that --help or --version does not
// take. Were gpuexec to run the job anyway, it would exit 0.
func TestStrayWordsAre125(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		args   func(lock string) []string
		stderr string
	}{
		{"a duration in two words", func(l string) []string {
			return []string{"--lock", l, "--timeout", "1h", "30m", "--wait", "0", "--", helperBin, "0"}
		}, `"30m" before "--" is not a flag, a flag's value or a subcommand`},
		{"a command before --", func(l string) []string {
			return []string{"--lock", l, helperBin, "7", "--", helperBin, "0"}
		}, `before "--" is not a flag`},
		{"a typo of a subcommand before --", func(l string) []string {
			return []string{"--lock", l, "stauts", "--", helperBin, "0"}
		}, `"stauts" before "--" is not a flag, a flag's value or a subcommand; did you mean "gpuexec status"?`},
		{"a word and no command", func(l string) []string {
			return []string{"--lock", l, "x", "--"}
		}, `"x" before "--"`},
		{"run with a word before --", func(l string) []string {
			return []string{"run", "--lock", l, "stray", "--", helperBin, "0"}
		}, `"stray" before "--" is not a flag, a flag's value or a subcommand: flags go before "--", the command after it (see gpuexec run --help)`},
		{"run with a word after its flags", func(l string) []string {
			return []string{"--lock", l, "run", "--wait", "0", "x", "--", helperBin, "0"}
		}, `"x" before "--"`},
		{"status with --", func(l string) []string {
			return []string{"status", "--lock", l, "--", helperBin, "0"}
		}, `status takes no "--" and command`},
		{"status with a bare --", func(l string) []string {
			return []string{"status", "--lock", l, "--"}
		}, `status takes no "--"`},
		{"flags before status, then --", func(l string) []string {
			return []string{"--lock", l, "status", "--json", "--", "x"}
		}, `status takes no "--"`},
		{"clear with --", func(l string) []string {
			return []string{"clear", "--lock", l, "--", "x"}
		}, `clear takes no "--"`},
		{"completion with --", func(l string) []string {
			return []string{"completion", "bash", "--", "x"}
		}, `completion takes no "--"`},
		{"help with --", func(l string) []string {
			return []string{"--lock", l, "--help", "--", helperBin, "0"}
		}, `--help takes no "--"`},
		{"help of no subcommand", func(l string) []string {
			return []string{"--help", "x"}
		}, `--help: "x" is not a subcommand (run, status, clear, completion)`},
		{"help of a typo of a subcommand", func(l string) []string {
			return []string{"--help", "stauts"}
		}, `--help: "stauts" is not a subcommand; did you mean "gpuexec --help status"?`},
		{"help of a subcommand, and a word", func(l string) []string {
			return []string{"--help", "status", "x"}
		}, `status --help takes no arguments, got "x"`},
		{"a subcommand's help with a word", func(l string) []string {
			return []string{"status", "--help", "x"}
		}, `status --help takes no arguments, got "x"`},
		{"a subcommand's help with --", func(l string) []string {
			return []string{"run", "--lock", l, "--help", "--", helperBin, "0"}
		}, `run --help takes no "--"`},
		{"version with a word", func(l string) []string {
			return []string{"--version", "x"}
		}, `--version takes no arguments, got "x"`},
		{"version with --", func(l string) []string {
			return []string{"--lock", l, "--version", "--", helperBin, "0"}
		}, `--version takes no "--"`},
		{"version before a subcommand", func(l string) []string {
			return []string{"-v", "status"}
		}, `--version takes no arguments, got "status"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			r := gx(t, []string{role("exit"), "TMPDIR=" + t.TempDir()}, tc.args(lock)...)
			wantRefused(t, r, tc.stderr)
			if _, err := os.Lstat(dir); err == nil {
				t.Errorf("the lock's folder was created")
			}
		})
	}
}

// What the parser takes is kept: flag values that are named like
// subcommands, a "--" inside the job's argv, a command given without "--",
// and --help and --version alone or, for --help, with a subcommand.
func TestWordsThatAreKept(t *testing.T) {
	t.Parallel()
	t.Run("flag values named like subcommands", func(t *testing.T) {
		t.Parallel()
		work := t.TempDir()
		argv := []string{"a", "--", "status", "--", "b"}
		_, d := runDump(t, nil, work, []string{"--lock", filepath.Join(work, "gpu.lock"), "--owner", "status", "--slug", "clear"}, argv...)
		if !slices.Equal(d.Args, argv) {
			t.Errorf("job argv %q, want %q", d.Args, argv)
		}
		var rec record
		if err := json.Unmarshal([]byte(d.Record), &rec); err != nil || rec.Owner != "status" || rec.Slug != "clear" {
			t.Errorf("the lock record %q (%v), want owner status and slug clear", d.Record, err)
		}
	})
	t.Run("a command without --", func(t *testing.T) {
		t.Parallel()
		dir, lock := lockIn(t)
		r := gx(t, []string{role("exit")}, "--lock", lock, "--wait", "0", helperBin, "3")
		wantCode(t, r, 3)
		wantNoLock(t, lock)
		wantOnlyGuard(t, dir)
	})
	for _, tc := range []struct {
		args []string
		has  string // a substring of stdout
	}{
		{[]string{"--help"}, "VERSION:"},
		{[]string{"-h"}, "EXIT STATUS:"},
		{[]string{"--help", "status"}, "gpuexec status - show who holds the lock"},
		{[]string{"-h", "clear", "--force"}, "gpuexec clear - remove a stale lock"},
		{[]string{"status", "--json", "--help"}, "gpuexec status - show who holds the lock"},
		{[]string{"--gpus", "0", "clear", "--help"}, "gpuexec clear - remove a stale lock"},
		{[]string{"run", "--help"}, "gpuexec run - run COMMAND"},
		{[]string{"completion", "-h"}, "gpuexec completion - print a shell completion script"},
		{[]string{"--help", "--version"}, "EXIT STATUS:"},
		{[]string{"-v"}, "gpuexec "},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			r := gx(t, []string{"TMPDIR=" + t.TempDir()}, tc.args...)
			wantCode(t, r, 0)
			if !strings.Contains(r.stdout, tc.has) {
				t.Errorf("stdout lacks %q:\n%s", tc.has, r.stdout)
			}
			if r.stderr != "" {
				t.Errorf("stderr: %q", r.stderr)
			}
		})
	}
}

// A --lock shaped like a URL or HOST:PORT that is not etcd:// (a mistyped
// etcd URL) is refused by run, status and clear, from the flag or the
// variable, with one line naming etcd://, and nothing is made in the
// working folder: taken as a path it would be a lock of this machine
// alone, and jobs on other machines would no longer be excluded.
func TestURLShapedLockIsRefused(t *testing.T) {
	t.Parallel()
	urls := []string{
		"http://127.0.0.1:2379/gpuexec/x", "https://etcd.example:2379/gpuexec/x", "etcd3://h:2379/k",
		"etcd:/h:2379/k", "etcd:h:2379/k", "127.0.0.1:2379/gpuexec/x", "host:2379/gpuexec/x", "//h:2379/gpuexec/x",
	}
	commands := map[string][]string{
		"run":    {"--wait", "0", "--", helperBin, "0"},
		"status": {"status"},
		"clear":  {"clear", "--force"},
	}
	for _, url := range urls {
		for name, args := range commands {
			for _, byVariable := range []bool{false, true} {
				t.Run(name+" "+url+map[bool]string{true: " from GPUEXEC_LOCK"}[byVariable], func(t *testing.T) {
					t.Parallel()
					work := t.TempDir()
					env := []string{role("exit"), "TMPDIR=" + t.TempDir()}
					a := slices.Clone(args)
					if byVariable {
						env = append(env, "GPUEXEC_LOCK="+url)
					} else {
						a = append([]string{"--lock", url}, a...)
					}
					cmd := gpuexecCmd(env, a...)
					cmd.Dir = work
					r := startProc(t, cmd).wait(t)
					wantRefused(t, r, "is shaped like a URL or HOST:PORT, not a lock file's path: an etcd lock is etcd://HOST:PORT/KEY")
					if ents, _ := os.ReadDir(work); len(ents) > 0 {
						t.Errorf("made in the working folder: %v", ents)
					}
				})
			}
		}
	}
}
