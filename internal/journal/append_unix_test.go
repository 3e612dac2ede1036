//go:build unix

package journal

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
)

// TestAppendRefusesWhatIsNotAJournal: a link, a FIFO (with no reader:
// never waited on), a folder, a file with two names are refused, left as
// they are, and nothing is written through them.
func TestAppendRefusesWhatIsNotAJournal(t *testing.T) {
	tests := []struct {
		name  string
		plant func(t *testing.T, path, elsewhere string)
	}{
		{"symlink", func(t *testing.T, path, elsewhere string) {
			if err := os.Symlink(elsewhere, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"dangling symlink", func(t *testing.T, path, elsewhere string) {
			if err := os.Symlink(elsewhere+".none", path); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo", func(t *testing.T, path, _ string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"folder", func(t *testing.T, path, _ string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"hard link", func(t *testing.T, path, elsewhere string) {
			if err := os.Link(elsewhere, path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "j.journal")
			elsewhere := filepath.Join(dir, "precious")
			if err := os.WriteFile(elsewhere, []byte("precious\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			tt.plant(t, path, elsewhere)
			done := make(chan error, 1)
			go func() { done <- Append(path, record("a")) }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("appended")
				}
				if !errors.Is(err, osfile.ErrNotRegular) {
					t.Errorf("err %v, want ErrNotRegular", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Append blocked")
			}
			if b, _ := os.ReadFile(elsewhere); string(b) != "precious\n" {
				t.Errorf("the file elsewhere now holds %q", b)
			}
			if _, err := os.Stat(elsewhere + ".none"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a link's target was created: %v", err)
			}
		})
	}
}

// TestAppendCreatesAsTheLockDoes: the journal gets the mode and group the
// lock's shared files get in its folder.
func TestAppendCreatesAsTheLockDoes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a folder another group")
	}
	const gid = 4241
	tests := []struct {
		name     string
		mode     os.FileMode
		wantPerm os.FileMode
		wantGID  int
	}{
		{"group folder", os.ModeSetgid | 0o2775&0o777, 0o660, gid},
		{"own folder", 0o755, 0o600, 0},
		{"sticky folder for all", os.ModeSticky | 0o777, 0o666, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "d")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, 0, gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tt.mode); err != nil {
				t.Fatal(err)
			}
			old := syscall.Umask(0o022)
			defer syscall.Umask(old)
			path := filepath.Join(dir, "j.journal")
			if err := Append(path, record("a")); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			wantGID := tt.wantGID
			if wantGID == 0 {
				wantGID = gid // own folder: the folder's group too, but no group bits
				if tt.mode&os.ModeSticky != 0 {
					wantGID = os.Getegid()
				}
			}
			if fi.Mode().Perm() != tt.wantPerm || int(st.Gid) != wantGID {
				t.Errorf("journal %v group %d, want %v group %d", fi.Mode().Perm(), st.Gid, tt.wantPerm, wantGID)
			}
		})
	}
}
