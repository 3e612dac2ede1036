//go:build unix

package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// A bare name found on PATH that cannot be run is 126, as execvp(3), sh,
// env(1) and timeout(1) say, not 127; no lock is taken.
func TestFoundOnPathButNotExecutableIs126(t *testing.T) {
	t.Parallel()
	// path is a PATH of two folders: the first holds notexec (no execute
	// permission), a folder named sub and a script later without execute
	// permission, the second an executable later.
	path := func(t *testing.T) string {
		first, second := t.TempDir(), t.TempDir()
		if err := os.WriteFile(filepath.Join(first, "notexec"), []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(first, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(second, "later"), []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(first, "later"), []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return "PATH=" + first + string(os.PathListSeparator) + second
	}
	var cases []exitCase
	for _, tc := range []struct {
		command, stderr string
		want            int
	}{
		{"notexec", "notexec: command found but not executable", 126},
		{".", ".: is a folder, not a command", 126},
		{"sub", "sub: is a folder, not a command", 126},
		{"missing", "missing: command not found", 127},
		{"later", "", 3}, // not executable first on PATH, executable later: runs
	} {
		cases = append(cases, exitCase{name: tc.command, want: tc.want, stderr: tc.stderr,
			env: []string{"TMPDIR=" + t.TempDir(), path(t)},
			args: func(t *testing.T, lock string) []string {
				return []string{"--lock", lock, "--", tc.command}
			},
		})
	}
	testExitCases(t, cases)
}
