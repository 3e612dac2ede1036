//go:build unix

package logfile

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A link or a FIFO at the log's path, or at its sidecar's, is refused,
// never followed or waited on.
func TestRefusesNonRegular(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(path string) error
	}{
		{"link", func(p string) error { return os.Symlink(filepath.Join(filepath.Dir(p), "elsewhere"), p) }},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"folder", func(p string) error { return os.Mkdir(p, 0o755) }},
	} {
		for _, at := range []string{"log", "sidecar"} {
			t.Run(tc.name+" at the "+at, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "gpuexec.log")
				p := path
				if at == "sidecar" {
					p += LockSuffix
				}
				if err := tc.make(p); err != nil {
					t.Fatal(err)
				}
				if f, err := Open(path, Options{}); err == nil {
					f.Close()
					t.Fatalf("Open succeeded with a %s at the %s", tc.name, at)
				}
				if _, err := os.Lstat(filepath.Join(dir, "elsewhere")); err == nil {
					t.Error("the link was followed")
				}
			})
		}
	}
}

// The sidecar is for the caller alone, so that nobody else can take its
// lock: made 0600, tightened if the caller's and open to others (as older
// versions left it), refused if another user's or one with other names.
func TestSidecarIsTheCallersAlone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		make    func(t *testing.T, sidecar string)
		wantErr string
	}{
		{"made", func(*testing.T, string) {}, ""},
		{"left open to all", func(t *testing.T, p string) { mustWrite(t, p, 0o666) }, ""},
		{"of another user", func(t *testing.T, p string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give a file to another user")
			}
			mustWrite(t, p, 0o600)
			if err := os.Chown(p, 4242, 4242); err != nil {
				t.Fatal(err)
			}
		}, "belongs to another user (uid 4242)"},
		{"with another name", func(t *testing.T, p string) {
			mustWrite(t, p, 0o600)
			if err := os.Link(p, p+".other"); err != nil {
				t.Fatal(err)
			}
		}, "it has 2 names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gpuexec.log")
			sidecar := path + LockSuffix
			tc.make(t, sidecar)
			f, err := Open(path, Options{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Open: %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if fi, err := os.Stat(sidecar); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("sidecar %v, %v: want 0600", fi.Mode(), err)
			}
		})
	}
}

func mustWrite(t *testing.T, path string, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, nil, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
}

// A sidecar whose lock another process holds costs one wait of LockWait:
// the File is given up, says ErrBusy at once from then on, and a lock it
// gets late is let go at once, so that the other writers go on.
func TestBusyLockIsGivenUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpuexec.log")
	f, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	holder, err := os.Open(path + LockSuffix)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		done := make(chan error, 1)
		go func() { _, err := f.Write([]byte("held\n")); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrBusy) {
				t.Fatalf("write %d: %v, want ErrBusy", i, err)
			}
		case <-time.After(LockWait + 10*time.Second):
			t.Fatalf("write %d still waits %s after LockWait", i, 10*time.Second)
		}
	}
	late, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := late.Write([]byte("late\n")); !errors.Is(err, ErrBusy) {
		t.Fatalf("a File opened while the lock is held: %v, want ErrBusy", err)
	}
	syscall.Flock(int(holder.Fd()), syscall.LOCK_UN)
	// The given-up Files' waits get the lock now, and let it go.
	g, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Write([]byte("after\n")); err != nil {
		t.Fatalf("a writer after the holder let go: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "after\n" {
		t.Errorf("log: %q, want only the line written after", b)
	}
}

// A log whose rotated name is too long for the file system: every write
// that finds it full tells RotateFailed, once, and appends to the full
// file; none spins.
func TestRotationThatCannotHappen(t *testing.T) {
	path := filepath.Join(t.TempDir(), strings.Repeat("n", 240-len(".log"))+".log")
	var said []error
	f, err := Open(path, Options{MaxSize: lineLen, RotateFailed: func(err error) { said = append(said, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	done := make(chan error, 1)
	go func() {
		for n := range 3 {
			if _, err := f.Write([]byte(line(0, n))); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("writes still going after 20s: the rotation spins")
	}
	if len(said) != 2 || !errors.Is(said[0], syscall.ENAMETOOLONG) {
		t.Errorf("RotateFailed told %v, want twice ENAMETOOLONG", said)
	}
	if b, _ := os.ReadFile(path); string(b) != line(0, 0)+line(0, 1)+line(0, 2) {
		t.Errorf("log: %q", b)
	}
}

// A file put in the log's place is never written: a hard link to another
// file, another file renamed over the log, a symbolic link, a FIFO. A log
// removed is made again, and one rotated by another writer is followed.
func TestReplacedLog(t *testing.T) {
	for _, tc := range []struct {
		name     string
		swap     func(t *testing.T, log, victim string)
		replaced bool
	}{
		{"hard link", func(t *testing.T, log, victim string) { must(t, os.Remove(log)); must(t, os.Link(victim, log)) }, true},
		{"renamed over it", func(t *testing.T, log, victim string) { must(t, os.Rename(victim, log)) }, true},
		{"symbolic link", func(t *testing.T, log, victim string) { must(t, os.Remove(log)); must(t, os.Symlink(victim, log)) }, true},
		{"fifo", func(t *testing.T, log, victim string) { must(t, os.Remove(log)); must(t, syscall.Mkfifo(log, 0o644)) }, true},
		{"removed", func(t *testing.T, log, victim string) { must(t, os.Remove(log)) }, false},
		{"removed, and made again by another writer", func(t *testing.T, log, victim string) {
			must(t, os.Remove(log))
			g, err := Open(log, Options{})
			must(t, err)
			must(t, g.Close())
		}, false},
		{"rotated by another writer", func(t *testing.T, log, victim string) {
			g, err := Open(log, Options{MaxSize: lineLen})
			must(t, err)
			defer g.Close()
			_, err = g.Write([]byte(line(1, 0)))
			must(t, err)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "gpuexec.log")
			victim := filepath.Join(dir, "precious")
			must(t, os.WriteFile(victim, []byte("precious\n"), 0o644))
			f, err := Open(path, Options{})
			must(t, err)
			defer f.Close()
			_, err = f.Write([]byte(line(0, 0)))
			must(t, err)
			tc.swap(t, path, victim)
			_, err = f.Write([]byte(line(0, 1)))
			at := victim // where the file put in the log's place is now
			if _, err := os.Stat(victim); err != nil {
				at = path
			}
			if b, _ := os.ReadFile(at); string(b) != "precious\n" {
				t.Errorf("the file put in the log's place was written: %q", b)
			}
			if !tc.replaced {
				if err != nil {
					t.Fatal(err)
				}
				if b, _ := os.ReadFile(path); !strings.HasSuffix(string(b), line(0, 1)) {
					t.Errorf("log: %q, want it to end with the line", b)
				}
				return
			}
			if !errors.Is(err, ErrReplaced) {
				t.Fatalf("write into a %s: %v, want ErrReplaced", tc.name, err)
			}
			if _, err := f.Write([]byte(line(0, 2))); !errors.Is(err, ErrReplaced) {
				t.Errorf("the next write: %v, want ErrReplaced again", err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// On a full disk (a real 64 KiB tmpfs) a record cut short is taken back:
// the write says why and the file is as it was; with room again, records
// land whole.
func TestFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	disk := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", disk).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", disk).CombinedOutput(); err != nil {
			t.Errorf("umount: %v\n%s", err, out)
		}
	})
	path := filepath.Join(disk, "gpuexec.log")
	before := strings.Repeat(line(0, 0), 4096/lineLen-1) // a page less a line
	must(t, os.WriteFile(path, []byte(before), 0o644))
	fill, err := os.Create(filepath.Join(disk, "fill"))
	must(t, err)
	for {
		if _, err := fill.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	fill.Close()
	f, err := Open(path, Options{})
	must(t, err)
	defer f.Close()
	n, err := f.Write([]byte(strings.Repeat("y", 2*lineLen-1) + "\n"))
	if !errors.Is(err, syscall.ENOSPC) || n != 0 {
		t.Errorf("write on a full disk: %d, %v; want 0, ENOSPC", n, err)
	}
	if b, _ := os.ReadFile(path); string(b) != before {
		t.Errorf("the log after a write on a full disk: %d bytes, want the %d before", len(b), len(before))
	}
	must(t, os.Remove(fill.Name()))
	_, err = f.Write([]byte(line(0, 1)))
	must(t, err)
	if b, _ := os.ReadFile(path); string(b) != before+line(0, 1) {
		t.Errorf("the log after room was made: %q", b[len(before):])
	}
}

// A link planted at the log's path in the instant a rotation has renamed
// the log away and not yet made the fresh one (another program looping on
// symlink(2) there) is never followed: the file it points to is neither
// truncated nor written, however many rotations it races.
func TestRotationRacesAPlantedLink(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpuexec.log")
	victim := filepath.Join(dir, "precious")
	const precious = "precious\n"
	must(t, os.WriteFile(victim, []byte(precious), 0o644))
	stop := make(chan struct{})
	planted := make(chan int, 1)
	go func() {
		n := 0
		defer func() { planted <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if os.Symlink(victim, path) == nil {
				n++
			}
		}
	}()
	hit, rotations := 0, 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		f, err := Open(path, Options{MaxSize: lineLen})
		if err == nil {
			for n := range 20 {
				if _, err := f.Write([]byte(line(0, n))); err != nil {
					break
				}
			}
			f.Close()
		}
		if b, _ := os.ReadFile(victim); string(b) != precious {
			hit++
			must(t, os.WriteFile(victim, []byte(precious), 0o644))
		}
		os.Remove(path) // the link, or the log: start again
	}
	close(stop)
	n := <-planted
	if list, err := (&File{path: path}).backups(); err == nil {
		rotations = len(list)
	}
	t.Logf("%d rotations raced %d links planted: the file linked to was truncated or written %d times", rotations, n, hit)
	if hit != 0 {
		t.Errorf("a rotation followed a link planted at the log's path %d times", hit)
	}
}
