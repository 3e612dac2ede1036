package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func goodLine(owner string) string {
	return `{"v":1,"owner":"` + owner + `","slug":"ep1","argv":["render"],"user":"u","host":"h","pid":7,"lock":"/l/gpu.lock",` +
		`"queued":"2026-12-01T10:00:00Z","started":"2026-12-01T10:00:02Z","ended":"2026-12-01T10:01:02Z",` +
		`"waited_ms":2000,"held_ms":60000,"outcome":"ok","status":0}`
}

func TestFromSetsAsideWhatIsNotARecord(t *testing.T) {
	tests := []struct {
		name   string
		input  string
		kept   int
		reason string
	}{
		{"good", goodLine("a") + "\n", 1, ""},
		{"blank lines", "\n\n" + goodLine("a") + "\n\n", 1, ""},
		{"binary", "\x00\xff\xfe\n" + goodLine("a") + "\n", 1, "not JSON"},
		{"too long", `{"v":1,"owner":"` + strings.Repeat("x", MaxLine) + "\"}\n" + goodLine("a") + "\n", 1, "too long"},
		{"wrong types", `{"v":"1","owner":5}` + "\n", 0, "not JSON"},
		{"unknown outcome", strings.Replace(goodLine("a"), `"ok"`, `"great"`, 1) + "\n", 0, "invalid"},
		{"status disagrees", strings.Replace(goodLine("a"), `"status":0`, `"status":3`, 1) + "\n", 0, "invalid"},
		{"held disagrees", strings.Replace(goodLine("a"), `"held_ms":60000`, `"held_ms":6000000`, 1) + "\n", 0, "invalid"},
		{"ends before queued", strings.Replace(goodLine("a"), `"ended":"2026-12-01T10:01:02Z"`, `"ended":"2026-11-01T10:01:02Z"`, 1) + "\n", 0, "invalid"},
		{"no end", goodLine("a"), 0, "no end"},
		{"script in owner (kept, escaped where shown)", goodLine(`<script>alert(1)</script>`) + "\n", 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rd := &Read{}
			if err := rd.From(strings.NewReader(tt.input), Window{}); err != nil {
				t.Fatal(err)
			}
			rd.Finish()
			if len(rd.Records) != tt.kept {
				t.Errorf("kept %d records, want %d (set aside %v)", len(rd.Records), tt.kept, rd.SetAside)
			}
			if tt.reason != "" && rd.SetAside[tt.reason] != 1 {
				t.Errorf("set aside %v, want one %q", rd.SetAside, tt.reason)
			}
			if tt.reason == "" && rd.Lines() != 0 {
				t.Errorf("set aside %v, want none", rd.SetAside)
			}
		})
	}
}

func TestWindowAndDuplicates(t *testing.T) {
	rd := &Read{}
	in := goodLine("a") + "\n" + goodLine("a") + "\n"
	if err := rd.From(strings.NewReader(in), Window{}); err != nil {
		t.Fatal(err)
	}
	rd.Finish()
	if len(rd.Records) != 1 {
		t.Errorf("a record read twice kept %d times", len(rd.Records))
	}
	rd = &Read{}
	end := time.Date(2026, 12, 1, 10, 1, 2, 0, time.UTC)
	rd.From(strings.NewReader(in), Window{From: end.Add(time.Second)})
	if len(rd.Records) != 0 {
		t.Errorf("a record before the window was kept")
	}
	rd = &Read{}
	rd.From(strings.NewReader(in), Window{Until: end})
	if len(rd.Records) != 0 {
		t.Errorf("a record ending at Until was kept")
	}
}

func TestCutArgv(t *testing.T) {
	long := strings.Repeat("é", MaxArg) // 2 bytes a rune
	got, cut := CutArgv(append([]string{long}, make([]string, MaxArgs+3)...))
	if !cut || len(got) != MaxArgs || len(got[0]) > MaxArg || !strings.HasPrefix(long, got[0]) || len(got[0])%2 != 0 {
		t.Errorf("CutArgv: cut %v, %d args, first %d bytes", cut, len(got), len(got[0]))
	}
	if got, cut := CutArgv([]string{"a", "b"}); cut || len(got) != 2 {
		t.Errorf("CutArgv of a short argv: %v %v", got, cut)
	}
}

// A member of the group may put any number of files named as rotated
// journals beside one, each as large as a file may be read (sparse: no
// disk for it): one Load reads no more than MaxBytes of them all
// together, not MaxBytes of each, so that a report stays bounded in time.
func TestLoadBoundsTheBytesOfAllItsFiles(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, "j.journal")
	if err := os.WriteFile(main, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const files = 3
	for i := range files {
		line := "\n" + strings.Replace(goodLine("a"), `"pid":7`, fmt.Sprintf(`"pid":%d`, 100+i), 1) + "\n"
		name := filepath.Join(dir, fmt.Sprintf("j-2026-12-01T00-00-1%d.000.journal", i))
		f, err := os.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		// Zeros (a hole) up to its last line, which ends at MaxBytes.
		if _, err := f.WriteAt([]byte(line), MaxBytes-int64(len(line))); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	// Another journal named after it (another host's): read all the
	// same, before the rotated files of the first.
	other := filepath.Join(t.TempDir(), "other.journal")
	if err := os.WriteFile(other, []byte(goodLine("other")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rd, err := Load([]string{main, other}, Window{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rd.Records) > 2 || !rd.Truncated {
		t.Errorf("read %d records of %d files of %d MiB each and another journal (truncated %v): want at most two, the read stopped at MaxBytes in all",
			len(rd.Records), files, MaxBytes>>20, rd.Truncated)
	}
	if !slices.ContainsFunc(rd.Records, func(r Record) bool { return r.Owner == "other" }) {
		t.Errorf("the other journal's record was not read: the rotated files of the first took the bound")
	}
}
