package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/logfile"
	"github.com/gpuexec/gpuexec/internal/osfile"
)

// record is a valid record of a job that ran for a second.
func record(owner string) Record {
	q := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	s := q.Add(2 * time.Second)
	return Record{V: Version, Owner: owner, Slug: "ep1", Argv: []string{"render", "--all"}, User: "u", Host: "h", PID: 7,
		Lock: "/l/gpu.lock", Queued: q, Started: &s, Ended: s.Add(time.Second), WaitedMS: 2000, HeldMS: 1000, Outcome: OK}
}

func loadAll(t *testing.T, path string) *Read {
	t.Helper()
	rd, err := Load([]string{path}, Window{})
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

func TestLineCutsAndRefuses(t *testing.T) {
	long := record("a")
	long.Argv = append(make([]string, 0, MaxArgs+5), strings.Repeat("é", MaxArg))
	for range MaxArgs + 4 {
		long.Argv = append(long.Argv, "x")
	}
	bad := record("a")
	bad.Status = 3
	tests := []struct {
		name    string
		r       Record
		cut     bool
		wantErr error
	}{
		{"plain", record("a"), false, nil},
		{"argv cut", long, true, nil},
		{"invalid", bad, false, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Line(tt.r)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasSuffix(b, []byte("\n")) || bytes.Count(b, []byte("\n")) != 1 || len(b) > MaxLine+1 {
				t.Fatalf("not one line within MaxLine: %d bytes", len(b))
			}
			rd := &Read{}
			if err := rd.From(bytes.NewReader(b), Window{}); err != nil || len(rd.Records) != 1 {
				t.Fatalf("read back %v records, err %v, set aside %v", len(rd.Records), err, rd.SetAside)
			}
			if got := rd.Records[0]; got.Cut != tt.cut || len(got.Argv) > MaxArgs {
				t.Errorf("cut %v with %d args, want cut %v", got.Cut, len(got.Argv), tt.cut)
			}
		})
	}
}

func TestAppendRotatesBySize(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpu.lock.journal")
	line, err := Line(record("a"))
	if err != nil {
		t.Fatal(err)
	}
	// Fill the journal to just under MaxSize with lines a reader takes.
	n := MaxSize / len(line)
	if err := os.WriteFile(path, bytes.Repeat(line, n), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := Append(path, record("b")); err != nil {
			t.Fatal(err)
		}
	}
	rotated, err := logfile.Rotated(path)
	if err != nil || len(rotated) != 1 {
		t.Fatalf("rotated files %v (%v), want one", rotated, err)
	}
	fresh, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := bytes.Count(fresh, []byte("\n")); got != 3 {
		t.Errorf("the fresh journal has %d lines, want 3", got)
	}
	if rd := loadAll(t, path); len(rd.Files) != 2 || rd.Lines() != 0 {
		t.Errorf("read %v, set aside %v; want the journal and its rotated file, nothing set aside", rd.Files, rd.SetAside)
	}
}

func TestAppendKeepsTenRotated(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "j.journal")
	for i := range Keep + 5 {
		name, err := logfile.RotatedName(path, time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, bytes.Repeat([]byte("x"), MaxSize), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Append(path, record("a")); err != nil {
		t.Fatal(err)
	}
	rotated, err := logfile.Rotated(path)
	if err != nil || len(rotated) != Keep {
		t.Fatalf("%d rotated files (%v), want %d", len(rotated), err, Keep)
	}
}

func TestAppendConcurrentWritersLoseNoLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.journal")
	const writers, each = 16, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := record("a")
				r.PID = w*1000 + i
				// What is under test is that no line is torn or lost
				// once written; the wait's bound (ErrBusy) is
				// TestAppendGivesUpOnAHeldLock's. 800 appends from 16
				// goroutines at once can pass it where the lock is
				// polled (Windows, under Wine on a loaded machine).
				err := Append(path, r)
				for try := 0; try < 5 && errors.Is(err, ErrBusy); try++ {
					err = Append(path, r)
				}
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	rd := loadAll(t, path)
	if len(rd.Records) != writers*each || rd.Lines() != 0 {
		t.Errorf("%d records, set aside %v; want %d and none", len(rd.Records), rd.SetAside, writers*each)
	}
}

// A journal whose lock another process keeps is given up after AppendWait
// (ErrBusy), nothing written; once let go, the next line goes in.
func TestAppendGivesUpOnAHeldLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.journal")
	if err := Append(path, record("a")); err != nil {
		t.Fatal(err)
	}
	other, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if ok, err := osfile.TryLock(other); !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	if err := Append(path, record("b")); !errors.Is(err, ErrBusy) {
		t.Fatalf("Append under another's lock = %v, want ErrBusy", err)
	}
	osfile.Unlock(other)
	c := record("c")
	c.PID = 8 // not the same job as a's to Load
	if err := Append(path, c); err != nil {
		t.Fatal(err)
	}
	if rd := loadAll(t, path); len(rd.Records) != 2 || rd.Lines() != 0 {
		t.Errorf("%d records, set aside %v; want 2 and none", len(rd.Records), rd.SetAside)
	}
}

// JSON writes some bytes of an argument as six ("<" as \u003c, a byte
// that is not UTF-8 as \ufffd): MaxArgs arguments of MaxArg such bytes
// (HTML in a filter, file names in Latin-1) are a line over MaxLine. The
// job's line is written all the same, its Argv cut further (Cut).
func TestLineCutsAnArgvThatEscapesLong(t *testing.T) {
	for _, b := range []string{"<", "\xe9"} {
		r := record("a")
		r.Argv = nil
		for range MaxArgs {
			r.Argv = append(r.Argv, strings.Repeat(b, MaxArg))
		}
		line, err := Line(r)
		if err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		rd := &Read{}
		if err := rd.From(bytes.NewReader(line), Window{}); err != nil || len(rd.Records) != 1 || !rd.Records[0].Cut {
			t.Fatalf("%q: read back %d records (err %v, set aside %v), want one, cut", b, len(rd.Records), err, rd.SetAside)
		}
	}
}
