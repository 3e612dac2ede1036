package report_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/report"
	"github.com/gpuexec/gpuexec/internal/report/reporttest"
)

func TestHostileJournal(t *testing.T) {
	rd := read(t, reporttest.Hostile(day0))
	if rd.Lines() != reporttest.HostileSetAside || len(rd.Records) != len(reporttest.HostileNames)+1 {
		t.Errorf("kept %d records, set aside %v; want %d and %d lines", len(rd.Records), rd.SetAside, len(reporttest.HostileNames)+1, reporttest.HostileSetAside)
	}
	s := report.Summarize(rd, dayOpts())
	if s.Jobs == 0 {
		t.Fatal("no hostile record kept: the test tests nothing")
	}

	var h bytes.Buffer
	if err := report.WriteHTML(&h, s); err != nil {
		t.Fatal(err)
	}
	page := h.String()
	for _, bad := range []string{"<script", "<img", "<iframe", "</svg><", "\x1b", "\u202e", "<b>"} {
		if strings.Contains(page, bad) {
			i := strings.Index(page, bad)
			t.Errorf("the page holds %q unescaped: …%s…", bad, page[max(0, i-80):min(len(page), i+80)])
		}
	}
	if !utf8.ValidString(page) {
		t.Error("the page is not valid UTF-8")
	}
	if !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("the page does not show the owner <script>... escaped")
	}
	// The page's own elements alone: no script, nothing to fetch.
	allowed := map[string]bool{"!DOCTYPE": true, "html": true, "head": true, "meta": true, "title": true, "style": true, "body": true,
		"h1": true, "h2": true, "p": true, "table": true, "tr": true, "th": true, "td": true, "i": true, "span": true,
		"svg": true, "g": true, "line": true, "text": true, "rect": true}
	for _, m := range regexp.MustCompile(`</?([!A-Za-z][A-Za-z0-9-]*)`).FindAllStringSubmatch(page, -1) {
		if !allowed[m[1]] {
			t.Errorf("the page has an element <%s>", m[1])
		}
	}

	var tx bytes.Buffer
	if err := report.WriteText(&tx, s); err != nil {
		t.Fatal(err)
	}
	text := tx.String()
	if !utf8.ValidString(text) || strings.ContainsAny(text, "\x1b\x07\u202e\r") || strings.Contains(text, "line\nbreak") {
		t.Errorf("the text holds unescaped bytes:\n%q", text)
	}

	var js bytes.Buffer
	if err := report.WriteJSON(&js, s); err != nil {
		t.Fatal(err)
	}
	if !json.Valid(js.Bytes()) || bytes.Count(js.Bytes(), []byte("\n")) != 1 || bytes.ContainsAny(js.Bytes(), "\x1b\u202e") {
		t.Errorf("the JSON is not one line of printable, valid JSON: %q", js.String())
	}
	var back report.Summary
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, o := range back.Owners {
		found = found || o.Name == `<script>alert(1)</script>`
	}
	if !found {
		t.Error("the JSON does not give the owner back as written")
	}
}

// TestBounds: a journal of more owners, cards and failures than a report
// shows keeps within the bounds, and says what it left out.
func TestBounds(t *testing.T) {
	var rs []journal.Record
	for i := range 3000 {
		r := rec(strings.Repeat("o", 1+i%300)+"x", strings.Repeat("d", 1+i%100), 0, -1, 1, journal.Deferred)
		r.Devices = []string{strings.Repeat("d", 1+i%100)}
		rs = append(rs, r)
	}
	rd := &journal.Read{Records: rs}
	rd.Finish()
	s := report.Summarize(rd, dayOpts())
	if len(s.Owners) > report.MaxOwners || s.OwnersLeftOut != 300-report.MaxOwners {
		t.Errorf("%d owners, %d left out", len(s.Owners), s.OwnersLeftOut)
	}
	if len(s.Rows) > report.MaxRows || s.JobsOffRows == 0 {
		t.Errorf("%d rows, %d jobs off them", len(s.Rows), s.JobsOffRows)
	}
	if len(s.NotRun) != report.MaxListed || s.NotRunLeftOut != 3000-report.MaxListed {
		t.Errorf("%d listed, %d left out", len(s.NotRun), s.NotRunLeftOut)
	}
}

// TestBarsBound: a timeline keeps at most MaxBars bars, the latest of each
// row, and the page says how many it left out.
func TestBarsBound(t *testing.T) {
	var rs []journal.Record
	for i := range report.MaxBars + 5000 {
		rs = append(rs, rec("a", "0", 0, 0, 1+i%1000, journal.OK))
	}
	rs = append(rs, rec("b", "1", 0, 0, 10, journal.OK))
	rd := &journal.Read{Records: rs}
	rd.Finish()
	s := report.Summarize(rd, dayOpts())
	bars, left := 0, 0
	for _, r := range s.Rows {
		bars += len(r.Bars)
		left += r.BarsLeftOut
	}
	if bars > report.MaxBars || bars+left != report.MaxBars+5001 || len(s.Rows[1].Bars) != 1 {
		t.Errorf("%d bars kept, %d left out, of %d", bars, left, report.MaxBars+5001)
	}
	var h bytes.Buffer
	if err := report.WriteHTML(&h, s); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(h.String(), `<rect class="bar`); got != bars {
		t.Errorf("the page draws %d bars, the summary keeps %d", got, bars)
	}
	if !strings.Contains(h.String(), fmt.Sprintf("and %d earlier bars", left)) {
		t.Error("the page does not say how many bars it left out")
	}
}
