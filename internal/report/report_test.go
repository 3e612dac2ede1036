package report_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/report"
	"github.com/gpuexec/gpuexec/internal/report/reporttest"
)

var day0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// read is the records of lines, as journal.Load reads them.
func read(t *testing.T, lines []byte) *journal.Read {
	t.Helper()
	rd := &journal.Read{}
	if err := rd.From(bytes.NewReader(lines), journal.Window{}); err != nil {
		t.Fatal(err)
	}
	rd.Finish()
	return rd
}

func dayOpts() report.Options {
	return report.Options{Since: day0, Until: day0.Add(24 * time.Hour), Now: day0.Add(25 * time.Hour)}
}

// TestGenerated: every record reporttest makes is one the reader keeps.
func TestGenerated(t *testing.T) {
	for name, rs := range map[string][]journal.Record{"day": reporttest.Day(day0), "week": reporttest.Week(day0, 2000)} {
		rd := read(t, reporttest.Lines(rs))
		if len(rd.Records) != len(rs) || rd.Lines() != 0 {
			t.Errorf("%s: read %d of %d records, set aside %v", name, len(rd.Records), len(rs), rd.SetAside)
		}
	}
	if n := reporttest.Ran(reporttest.Day(day0)); n != reporttest.DayRan {
		t.Errorf("Ran(Day) = %d, DayRan %d", n, reporttest.DayRan)
	}
}

func TestDayPage(t *testing.T) {
	s := report.Summarize(read(t, reporttest.Lines(reporttest.Day(day0))), dayOpts())
	var b bytes.Buffer
	if err := report.WriteHTML(&b, s); err != nil {
		t.Fatal(err)
	}
	if p := os.Getenv("REPORT_HTML"); p != "" {
		os.WriteFile(p, b.Bytes(), 0o644)
	}
	if got := strings.Count(b.String(), `<rect class="bar`); got != reporttest.DayRan {
		t.Errorf("%d bars, want %d", got, reporttest.DayRan)
	}
	var tb bytes.Buffer
	report.WriteText(&tb, s)
	t.Log("\n" + tb.String())
	var jb bytes.Buffer
	report.WriteJSON(&jb, s)
	var v map[string]any
	if err := json.Unmarshal(jb.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
}

// TestWriteJournals writes Day's journal and a Week of 2,000 jobs to the
// folder $REPORTTEST_OUT, for docs/report.md and docs/performance.md;
// skipped without it.
func TestWriteJournals(t *testing.T) {
	dir := os.Getenv("REPORTTEST_OUT")
	if dir == "" {
		t.Skip("REPORTTEST_OUT not set")
	}
	for name, rs := range map[string][]journal.Record{"day.journal": reporttest.Day(day0), "week.journal": reporttest.Week(day0, 2000)} {
		if err := os.WriteFile(dir+"/"+name, reporttest.Lines(rs), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func reporttestDay() []byte { return reporttest.Lines(reporttest.Day(day0)) }
