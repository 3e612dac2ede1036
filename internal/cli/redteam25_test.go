package cli

// Findings of a red-team pass over issue 25's status and clear.

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// clear of a lock whose folder does not exist, or is not a folder, says
// so as status does (one line, 125), with or without --force, and creates
// nothing: a mistyped --lock in a cleanup script is not a free lock.
// (clear said "free: nothing to clear", exit 0, for a missing folder.)
func TestClearOfAMissingFolderIsNotFree(t *testing.T) {
	t.Parallel()
	env := []string{"TMPDIR=" + t.TempDir()}
	top := t.TempDir()
	missing := filepath.Join(top, "no", "such")
	file := filepath.Join(top, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, lock, says string
	}{
		{"a folder that does not exist", filepath.Join(missing, "gpu.lock"), missing + " does not exist"},
		{"a file for a folder", filepath.Join(file, "gpu.lock"), file + ": not a directory"},
	} {
		for _, args := range [][]string{{"clear"}, {"clear", "--force"}} {
			args := append(args, "--lock", c.lock)
			r := gx(t, env, args...)
			if r.code != 125 || r.stdout != "" || len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, c.says) ||
				!strings.Contains(r.stderr, "cannot read the lock "+c.lock) {
				t.Errorf("%s: %v: exit %d, stdout %q, stderr %q; want 125 and one line saying %q",
					c.name, args, r.code, r.stdout, r.stderr, c.says)
			}
		}
	}
	if _, err := os.Lstat(filepath.Dir(missing)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("clear made the missing lock's folder (%v)", err)
	}
}

// help and version after flags are a job's command (gpuexec --lock L
// help runs a command named help), but one that is not found points to
// gpuexec's own, as gpuexec help does. (It said "help: command not
// found" alone, exit 127: issue 25's item 12 with a flag before the
// word.)
func TestHelpWordAfterFlagsPointsToHelp(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	env := []string{"TMPDIR=" + t.TempDir(), "PATH=" + t.TempDir()}
	for _, w := range []string{"help", "version"} {
		r := gx(t, env, "--lock", lock, "--wait", "0", w)
		wantCode(t, r, 127)
		if want := `"gpuexec --` + w + `"`; !strings.Contains(r.stderr, w+": command not found") || !strings.Contains(r.stderr, want) {
			t.Errorf("gpuexec --lock L %s: stderr %q, want it to point to %s", w, r.stderr, want)
		}
	}
}
