package logfile

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// The test binary doubles as a writer process (see writer): the
// environment names the log, the writer's number and how many lines to
// write.
const (
	writerEnv = "LOGFILE_TEST_WRITER" // "ID LINES MAXSIZE"
	pathEnv   = "LOGFILE_TEST_PATH"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(writerEnv); spec != "" {
		os.Exit(writer(spec, os.Getenv(pathEnv)))
	}
	os.Exit(m.Run())
}

// lineLen is the length of every line the tests write, newline included.
const lineLen = 64

// line is writer id's n-th line, lineLen bytes long.
func line(id, n int) string {
	s := fmt.Sprintf("writer %02d line %06d ", id, n)
	return s + strings.Repeat("x", lineLen-1-len(s)) + "\n"
}

// writer writes its lines into the log, one Write each, as gpuexec's
// logger does, and returns the exit status.
func writer(spec, path string) int {
	var id, lines int
	var max int64
	if _, err := fmt.Sscan(spec, &id, &lines, &max); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		return 2
	}
	f, err := Open(path, Options{MaxSize: max})
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		return 2
	}
	defer func() { f.Close() }()
	for n := range lines {
		// A writer that waited LockWait for the others gives its File
		// up, having written nothing (ErrBusy): under Wine, whose lock
		// is polled, one writer among several busy ones can. It opens
		// the log again and writes the line then, a few times at most:
		// what is counted is that no line written is lost or split.
		for try := 0; ; try++ {
			_, err := f.Write([]byte(line(id, n)))
			if err == nil {
				break
			}
			if !errors.Is(err, ErrBusy) || try == 5 {
				fmt.Fprintln(os.Stderr, "writer:", err)
				return 1
			}
			f.Close()
			if f, err = Open(path, Options{MaxSize: max}); err != nil {
				fmt.Fprintln(os.Stderr, "writer:", err)
				return 2
			}
		}
	}
	return 0
}

func TestBackupName(t *testing.T) {
	at := time.Date(2026, 10, 12, 20, 18, 3, 7_000_000, time.FixedZone("CEST", 2*3600))
	for _, tc := range []struct{ path, want string }{
		{"/var/log/gpuexec.log", "/var/log/gpuexec-2026-10-12T18-18-03.007.log"},
		{"/var/log/gpuexec", "/var/log/gpuexec-2026-10-12T18-18-03.007"},
		{"/var/log/nightly.render.log", "/var/log/nightly.render-2026-10-12T18-18-03.007.log"},
	} {
		path, want := filepath.FromSlash(tc.path), filepath.FromSlash(tc.want)
		if got := backupName(path, at); got != want {
			t.Errorf("backupName(%q) = %q, want %q", path, got, want)
		}
	}
}

// files are the log and its rotated files, oldest first, with their
// content.
type files struct {
	backups []string // paths, oldest first
	all     []string // contents: the backups', then the log's
}

func readFiles(t *testing.T, path string) files {
	t.Helper()
	f := &File{path: path}
	list, err := f.backups()
	if err != nil {
		t.Fatal(err)
	}
	var out files
	for i := len(list) - 1; i >= 0; i-- {
		out.backups = append(out.backups, list[i].path)
	}
	for _, p := range append(append([]string(nil), out.backups...), path) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out.all = append(out.all, string(b))
	}
	return out
}

// figures is what readFiles found of the lines that writers wrote.
type figures struct {
	lines     int // lines the writers wrote
	lost      int // lines written and found in no file
	twice     int // lines found more than once
	split     int // broken lines: cut, joined or interleaved with another
	disorder  int // lines found after a later line of the same writer
	rotations int // rotated files
	want      int // rotated files that the lines make, if each rotation happens once, at the limit
	short     int // rotated files not as full as whole lines make them: a rotation done twice, or early
	over      int // files over the limit
}

func (g figures) String() string {
	return fmt.Sprintf("%d lines: %d lost, %d found twice, %d split, %d out of order; %d rotations (want %d), %d rotated files short, %d over the limit",
		g.lines, g.lost, g.twice, g.split, g.disorder, g.rotations, g.want, g.short, g.over)
}

// tally counts, in the log at path and its rotated files, the lines that
// writers wrote (lines each, writer ids 0..writers-1) with maxSize.
func tally(t *testing.T, path string, writers, lines int, maxSize int64) (files, figures) {
	t.Helper()
	got := readFiles(t, path)
	perFile := int(maxSize) / lineLen
	g := figures{lines: writers * lines, rotations: len(got.backups)}
	g.want = (g.lines+perFile-1)/perFile - 1
	seen := make([][]int, writers) // each writer's lines: how often found
	last := make([]int, writers)   // each writer's latest line found
	for id := range seen {
		seen[id] = make([]int, lines)
		last[id] = -1
	}
	for i, content := range got.all {
		name := path
		if i < len(got.backups) {
			name = got.backups[i]
		}
		if int64(len(content)) > maxSize {
			g.over++
			t.Logf("%s: %d bytes, over the limit of %d", name, len(content), maxSize)
		}
		if i < len(got.backups) && len(content) != perFile*lineLen {
			g.short++
			t.Logf("%s: rotated at %d bytes, not at the limit (%d lines of %d bytes)", name, len(content), perFile, lineLen)
		}
		for l := range strings.SplitAfterSeq(content, "\n") {
			if l == "" {
				continue
			}
			var id, n int
			if _, err := fmt.Sscanf(l, "writer %d line %d ", &id, &n); err != nil || id < 0 || id >= writers || n < 0 || n >= lines || l != line(id, n) {
				g.split++
				if g.split <= 3 {
					t.Logf("%s: broken line %q", name, l)
				}
				continue
			}
			if seen[id][n]++; seen[id][n] > 1 {
				g.twice++
			}
			if n < last[id] {
				g.disorder++
			}
			last[id] = max(last[id], n)
		}
	}
	for id := range seen {
		for _, k := range seen[id] {
			if k == 0 {
				g.lost++
			}
		}
	}
	return got, g
}

// checkLines checks the log at path and its rotated files after writers
// wrote lines each (writer ids 0..writers-1) with maxSize: every line is
// there once, whole, in each writer's order; no file is over maxSize; and
// each rotation happened once, at the limit: every rotated file is as full
// as whole lines make it, so there are exactly as many as needed.
func checkLines(t *testing.T, path string, writers, lines int, maxSize int64) files {
	t.Helper()
	got, g := tally(t, path, writers, lines, maxSize)
	if g.lost != 0 || g.twice != 0 || g.split != 0 || g.disorder != 0 || g.rotations != g.want || g.short != 0 || g.over != 0 {
		t.Errorf("%v; want every line once, whole, in order, and each rotation once at the limit", g)
	}
	return got
}

// One process: the log is rotated when the next line would not fit.
func TestRotatesAtTheLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpuexec.log")
	const maxSize = 10*lineLen + lineLen/2
	f, err := Open(path, Options{MaxSize: maxSize})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for n := range 35 {
		if _, err := f.Write([]byte(line(0, n))); err != nil {
			t.Fatal(err)
		}
	}
	got := checkLines(t, path, 1, 35, maxSize)
	if len(got.backups) != 3 || len(got.all[3]) != 5*lineLen {
		t.Errorf("%d backups, the log %d bytes; want 3 and %d", len(got.backups), len(got.all[3]), 5*lineLen)
	}
}

// Several processes write one log with a small limit, as gpuexec jobs
// started by cron do: no line is lost or split, and each rotation happens
// once, exactly at the limit.
func TestSeveralWriters(t *testing.T) {
	writers, lines := 8, 400
	if testing.Short() {
		writers, lines = 4, 100 // file system calls cost much more under Wine
	}
	const maxSize = 4096 // 64 lines
	path := filepath.Join(t.TempDir(), "gpuexec.log")
	runWriters(t, path, writers, lines, maxSize)
	got := checkLines(t, path, writers, lines, maxSize)
	t.Logf("%d writers, %d lines each, %d bytes a line, limit %d bytes: %d rotations", writers, lines, lineLen, maxSize, len(got.backups))
}

// The same at the limit gpuexec's --log-max-size counts in, a megabyte
// (--log-max-size 1): 8 processes write 2.5 MiB into one log. The figures
// are logged (go test -v -run SeveralWritersMegabyte ./internal/logfile/).
func TestSeveralWritersMegabyte(t *testing.T) {
	if testing.Short() {
		t.Skip("40,000 writes")
	}
	const writers, lines, maxSize = 8, 5120, 1 << 20
	path := filepath.Join(t.TempDir(), "gpuexec.log")
	start := time.Now()
	runWriters(t, path, writers, lines, maxSize)
	took := time.Since(start)
	_, g := tally(t, path, writers, lines, maxSize)
	t.Logf("%d writers, %d lines each of %d bytes, --log-max-size 1 (%d bytes), %v: %v", writers, lines, lineLen, maxSize, took.Round(time.Millisecond), g)
	if g.lost != 0 || g.twice != 0 || g.split != 0 || g.disorder != 0 || g.rotations != g.want || g.short != 0 || g.over != 0 {
		t.Errorf("want every line once, whole, in order, and each rotation once at the limit")
	}
}

// runWriters runs writers processes (the test binary as writer), each
// writing lines lines into the log at path with maxSize, all at once, and
// waits for them.
func runWriters(t *testing.T, path string, writers, lines int, maxSize int64) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmds := make([]*exec.Cmd, writers)
	for id := range cmds {
		cmd := exec.Command(self)
		cmd.Env = testsupport.Env(fmt.Sprintf("%s=%d %d %d", writerEnv, id, lines, maxSize), pathEnv+"="+path)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[id] = cmd
	}
	for id, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer %d: %v", id, err)
		}
	}
}

// Rotated files beyond MaxBackups, and those older than MaxAge, are
// removed at a rotation; files that only look like backups are not.
func TestPrune(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       Options
		oldKept int // of the 4 backups there before (1, 2, 3 and 40 days old)
	}{
		{"keep all", Options{}, 4},
		{"max backups 2", Options{MaxBackups: 2}, 1}, // the new one and the newest old one
		{"max age 7 days", Options{MaxAge: 7 * 24 * time.Hour}, 3},
		{"both", Options{MaxBackups: 3, MaxAge: 36 * time.Hour}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "gpuexec.log")
			now := time.Now()
			var old []string
			for _, days := range []int{1, 2, 3, 40} {
				p := backupName(path, now.Add(-time.Duration(days)*24*time.Hour))
				if err := os.WriteFile(p, []byte("old\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				old = append(old, p)
			}
			others := []string{"gpuexec-notatime.log", "gpuexec.log.1", "other-2020-01-01T00-00-00.000.log"}
			for _, n := range others {
				if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			o := tc.o
			o.MaxSize = 2 * lineLen
			f, err := Open(path, o)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for n := range 3 { // the third rotates
				if _, err := f.Write([]byte(line(0, n))); err != nil {
					t.Fatal(err)
				}
			}
			kept := 0
			for i, p := range old {
				_, err := os.Stat(p)
				if err == nil {
					kept++
					if i >= tc.oldKept {
						t.Errorf("%s kept", filepath.Base(p))
					}
				}
			}
			if kept != tc.oldKept {
				t.Errorf("%d old backups kept, want %d", kept, tc.oldKept)
			}
			for _, n := range others {
				if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
					t.Errorf("%s, no backup, was removed: %v", n, err)
				}
			}
			ents, _ := os.ReadDir(dir)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			sort.Strings(names)
			t.Log(strings.Join(names, " "))
		})
	}
}

// Two rotations within one millisecond keep both backups.
func TestBackupNamesDoNotCollide(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpuexec.log")
	f, err := Open(path, Options{MaxSize: lineLen})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := time.Now()
	taken := backupName(path, at)
	if err := os.WriteFile(taken, []byte(line(9, 0)), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := f.freeBackupName(at); err != nil || got == taken || got != backupName(path, at.Add(time.Millisecond)) {
		t.Errorf("freeBackupName = %q, %v with %q taken", got, err, taken)
	}
}

func TestClosed(t *testing.T) {
	f, err := Open(filepath.Join(t.TempDir(), "gpuexec.log"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x\n")); err == nil {
		t.Error("a write after Close succeeded")
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// The search for a free rotated name ends after maxBackupTries names taken
// (one too long for the file system: TestRotationThatCannotHappen).
func TestBackupNameSearchEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpuexec.log")
	f, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := time.Now()
	for i := range maxBackupTries {
		if err := os.WriteFile(backupName(path, at.Add(time.Duration(i)*time.Millisecond)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if name, err := f.freeBackupName(at); err == nil {
		t.Errorf("freeBackupName = %q with every name taken", name)
	}
}
