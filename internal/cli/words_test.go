package cli

// Strict words: a word of the command line that no command takes is one
// line and status 125, never ignored and never a run; a --lock shaped like
// a URL that is not etcd:// is refused before anything is made.

import (
	"encoding/json"
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
