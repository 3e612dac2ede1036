package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/journal"
)

// top reads a journal's last topJournalTail bytes only, skips the line the
// bound cuts, sets aside what is not a record, and reads the file again
// only when it changed.
func TestTopJournalTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "gpu.lock.journal")
	ended := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var b strings.Builder
	b.WriteString(journalLine(t, "first", "cut", journal.OK, 0, 10*time.Second, 50*time.Second, ended))
	// Lines enough to push the first out of the tail, each a record, one
	// huge non-record and binary among them.
	b.WriteString(strings.Repeat("x", topJournalTail/2) + "\n")
	b.WriteString("\x00\xff\x1b[2J\n")
	n := 0
	for b.Len() < topJournalTail+4096 {
		b.WriteString(journalLine(t, "me", "ep", journal.OK, 0, 10*time.Second, 50*time.Second, ended.Add(time.Duration(n)*time.Second)))
		n++
	}
	b.WriteString(journalLine(t, "last", "one", journal.Failed, 2, 10*time.Second, 50*time.Second, ended.Add(time.Hour)))
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tail := &journalTail{path: path}
	tail.refresh()
	if tail.err != nil || tail.missing {
		t.Fatalf("refresh: %v, missing %v", tail.err, tail.missing)
	}
	last := tail.records[len(tail.records)-1]
	if last.Owner != "last" || last.Slug != "one" {
		t.Errorf("the last record read is %s/%s", last.Owner, last.Slug)
	}
	for _, r := range tail.records {
		if r.Owner == "first" {
			t.Error("a record before the tail was read")
		}
	}
	if len(tail.records) > n+1 || len(tail.records) < n/4 {
		t.Errorf("%d records read of %d", len(tail.records), n+1)
	}
	// The huge line is the one the bound cuts: skipped, not counted; the
	// binary one is set aside.
	if tail.setAside["not JSON"] != 1 || tail.setAside["too long"] != 0 || tail.setAside["invalid"] != 0 {
		t.Errorf("set aside: %v", tail.setAside)
	}

	// Unchanged: not read again (the records kept are the same slice).
	before := &tail.records[0]
	tail.refresh()
	if &tail.records[0] != before {
		t.Error("an unchanged journal was read again")
	}
	// Changed: read again.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(journalLine(t, "newer", "job", journal.OK, 0, 10*time.Second, 50*time.Second, ended.Add(2*time.Hour)))
	f.Close()
	tail.refresh()
	if got := tail.records[len(tail.records)-1]; got.Owner != "newer" {
		t.Errorf("after an append the last record is %s/%s", got.Owner, got.Slug)
	}

	// Gone: missing, quietly; not a regular file: an error, never read.
	os.Remove(path)
	tail.refresh()
	if !tail.missing || tail.records != nil {
		t.Errorf("a removed journal: missing %v, %d records", tail.missing, len(tail.records))
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	tail.refresh()
	if tail.err == nil || tail.missing {
		t.Errorf("a folder as the journal: err %v, missing %v", tail.err, tail.missing)
	}
}
