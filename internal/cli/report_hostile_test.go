package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpuexec/gpuexec/internal/report/reporttest"
)

// TestReportHostileJournal runs the real binary on a journal of hostile
// lines (reporttest.Hostile: HTML and script in owners and slugs, terminal
// escapes, invalid UTF-8, a line over the bound, binary, wrong types): the
// report is made in each form, says what it set aside, and no name
// reaches the page, the terminal or the JSON unescaped.
func TestReportHostileJournal(t *testing.T) {
	dir := t.TempDir()
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	j := filepath.Join(dir, "hostile.journal")
	if err := os.WriteFile(j, reporttest.Hostile(day), 0o600); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "page.html")
	run := func(args ...string) []byte {
		t.Helper()
		cmd := gpuexecCmd([]string{"TMPDIR=" + dir}, append([]string{"report", "--journal", j,
			"--since", "2026-12-01T00:00:00Z", "--until", "2026-12-02T00:00:00Z"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || stderr.Len() > 0 {
			t.Fatalf("gpuexec report %v: %v\n%s", args, err, stderr.Bytes())
		}
		return out
	}

	text := string(run())
	if !utf8.ValidString(text) || strings.ContainsAny(text, "\x1b\x07\u202e\r\x00") || strings.Contains(text, "line\nbreak") {
		t.Errorf("the text holds bytes unescaped:\n%q", text)
	}
	for _, want := range []string{`\x1b]0;pwned\a\x1b[2J`, `\u202eevil`, `line\nbreak<style>`,
		"Set aside 6 line(s) that were not valid records (2 invalid, 1 no end, 2 not JSON, 1 too long)"} {
		if !strings.Contains(text, want) {
			t.Errorf("the text does not show %q:\n%s", want, text)
		}
	}

	js := run("--json")
	if !json.Valid(js) || bytes.Count(js, []byte("\n")) != 1 || bytes.ContainsAny(js, "\x1b\u202e") || !utf8.Valid(js) {
		t.Errorf("--json is not one line of printable, valid JSON:\n%q", js)
	}

	if out := run("--html", page); len(out) != 0 {
		t.Errorf("--html printed %q", out)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	if !utf8.ValidString(html) {
		t.Error("the page is not valid UTF-8")
	}
	allowed := map[string]bool{"!DOCTYPE": true, "html": true, "head": true, "meta": true, "title": true, "style": true, "body": true,
		"h1": true, "h2": true, "p": true, "table": true, "tr": true, "th": true, "td": true, "i": true, "span": true,
		"svg": true, "g": true, "line": true, "text": true, "rect": true}
	for _, m := range regexp.MustCompile(`</?([!A-Za-z][A-Za-z0-9-]*)`).FindAllStringSubmatch(html, -1) {
		if !allowed[m[1]] {
			t.Errorf("the page has an element <%s>", m[1])
		}
	}
	for _, bad := range []string{"<script", "<img", "<iframe", "<u>", "<b>", "\x1b", "\u202e", "\xff"} {
		if strings.Contains(html, bad) {
			t.Errorf("the page holds %q unescaped", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;", `&#34;&gt;&lt;img src=x onerror=alert(2)&gt;`, "raw\ufffd\ufffd&lt;u&gt;"} {
		if !strings.Contains(html, want) {
			t.Errorf("the page does not show %q", want)
		}
	}
}
