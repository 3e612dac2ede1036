//go:build unix

package safepath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make folders and links of another user")
	}
	const other = 4242
	base := t.TempDir()
	mk := func(name string, mode os.FileMode, uid int) string {
		t.Helper()
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, -1); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := func(name, target string, uid int) string {
		t.Helper()
		p := filepath.Join(base, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, -1); err != nil {
			t.Fatal(err)
		}
		return p
	}
	private := mk("private", 0o755, 0)
	group := mk("group", os.ModeSetgid|0o775, 0)
	sticky := mk("sticky", os.ModeSticky|0o777, 0)
	theirs := mk("theirs", 0o755, other)
	if err := os.Mkdir(filepath.Join(group, "team"), 0o755); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(sticky, "mine")
	if err := os.Mkdir(mine, 0o700); err != nil {
		t.Fatal(err)
	}
	theirsInSticky := filepath.Join(sticky, "theirs")
	if err := os.Mkdir(theirsInSticky, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Lchown(theirsInSticky, other, -1)
	myLink := link("my-link", private, 0)
	theirLink := link("their-link", private, other)

	for _, tt := range []struct {
		name          string
		dir           string
		create        os.FileMode
		priv          bool
		want, wantErr string
	}{
		{"a private folder", private, 0, true, private, ""},
		{"a group folder, for a lock", group, 0, false, group, ""},
		{"a group folder, for a log", group, 0, true, "", "may be written by others"},
		{"a folder in a group folder", filepath.Join(group, "team"), 0, false, "", "could move team away"},
		{"a new folder in a group folder", filepath.Join(group, "new"), 0o700, false, "", "could move what is made in it away"},
		{"my folder in a sticky folder", mine, 0, true, mine, ""},
		{"another user's folder in a sticky folder", theirsInSticky, 0, false, "", "uid 4242"},
		{"a new folder in a sticky folder", filepath.Join(sticky, "new"), 0o700, false, filepath.Join(sticky, "new"), ""},
		{"another user's folder", filepath.Join(theirs, "x"), 0, false, "", "belongs to another user (uid 4242)"},
		{"another user's folder, for a log", theirs, 0, true, "", "belongs to another user (uid 4242), who could put a link"},
		{"another user's folder, for a lock", theirs, 0, false, theirs, ""},
		{"my link", myLink, 0, false, private, ""},
		{"another user's link", theirLink, 0, false, "", "symbolic link of another user"},
		{"a missing folder, not created", filepath.Join(private, "a", "b"), 0, false, filepath.Join(private, "a", "b"), ""},
		{"a missing folder, created", filepath.Join(private, "c", "d"), 0o700, false, filepath.Join(private, "c", "d"), ""},
		{"a missing folder, created for a log", filepath.Join(private, "e", "f"), 0o755, true, filepath.Join(private, "e", "f"), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Dir(tt.dir, tt.create, tt.priv)
			switch {
			case tt.wantErr != "":
				var se *Error
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &se) {
					t.Fatalf("Dir(%s) = %q, %v; want an *Error with %q", tt.dir, got, err, tt.wantErr)
				}
			case err != nil || got != tt.want:
				t.Fatalf("Dir(%s) = %q, %v; want %q", tt.dir, got, err, tt.want)
			}
			if tt.create != 0 && err == nil {
				if fi, err := os.Stat(got); err != nil || !fi.IsDir() {
					t.Fatalf("%s not made: %v", got, err)
				}
				// The folder itself with the mode asked for (a lock's
				// private to its user), as the umask has it.
				if fi, _ := os.Stat(got); fi.Mode().Perm()&^tt.create != 0 || fi.Mode().Perm()&0o700 != 0o700 {
					t.Errorf("%s made %v, want %v", got, fi.Mode().Perm(), tt.create)
				}
			}
		})
	}
}
