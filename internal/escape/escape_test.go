package escape

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

var cases = []struct {
	name, in, text, json string
}{
	{"plain", "channels", "channels", `"channels"`},
	{"empty", "", "", `""`},
	{"unicode", "ünï-コード", "ünï-コード", `"ünï-コード"`},
	{"backslash kept", `C:\Program Files`, `C:\Program Files`, `"C:\\Program Files"`},
	{"newline", "a\nb", `a\nb`, `"a\nb"`},
	{"tab", "a\tb", `a\tb`, `"a\tb"`},
	{"escape sequence", "a\x1b[2Jb", `a\x1b[2Jb`, `"a\u001b[2Jb"`},
	{"NUL", "a\x00", `a\x00`, `"a\u0000"`},
	{"DEL", "a\x7f", `a\x7f`, `"a\u007f"`},
	{"C1 control", "a\u0085", `a\u0085`, `"a\u0085"`},
	{"invalid UTF-8", "a\xffb", `a\xffb`, `"a\ufffdb"`},
	{"a rune cut short", "a\xe2\x80", `a\xe2\x80`, `"a\ufffd\ufffd"`},
	{"replacement character kept", "a\ufffdb", "a\ufffdb", "\"a\ufffdb\""},
	{"bidi override", "a\u202eb", `a\u202eb`, `"a\u202eb"`},
	{"zero-width space", "a\u200bb", `a\u200bb`, `"a\u200bb"`},
	{"no-break space", "a\u00a0b", `a\u00a0b`, `"a\u00a0b"`},
	{"line separator", "a\u2028b", `a\u2028b`, `"a\u2028b"`},
	{"tag character", "a\U000e0001", `a\U000e0001`, `"a\udb40\udc01"`},
	{"emoji kept", "a🙂", "a🙂", `"a🙂"`},
	{"escaped already", `a\x1b\u202e`, `a\x1b\u202e`, `"a\\x1b\\u202e"`},
}

func TestText(t *testing.T) {
	for _, tt := range cases {
		if got := Text(tt.in); got != tt.text {
			t.Errorf("%s: Text(%q) = %q, want %q", tt.name, tt.in, got, tt.text)
		}
	}
}

func TestQuote(t *testing.T) {
	for _, tt := range cases {
		if got, want := Quote(tt.in), `"`+tt.text+`"`; !strings.ContainsAny(tt.in, `\"`) && got != want {
			t.Errorf("%s: Quote(%q) = %s, want %s", tt.name, tt.in, got, want)
		}
	}
	if got, want := Quote(`say "\n"`), `"say \"\\n\""`; got != want {
		t.Errorf("Quote escapes the quote and the backslash: %s, want %s", got, want)
	}
}

func TestJSON(t *testing.T) {
	for _, tt := range cases {
		b, err := json.Marshal(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(JSON(b)); got != tt.json {
			t.Errorf("%s: JSON(%s) = %s, want %s", tt.name, b, got, tt.json)
		}
	}
}

// FuzzEscape holds the contracts for any input: Text gives valid UTF-8 of
// printable runes and is idempotent; Quote escapes exactly what Text does
// (plus the quote and the backslash) and reads back; JSON gives printable
// runes and the same JSON value.
func FuzzEscape(f *testing.F) {
	for _, tt := range cases {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Text(s)
		if !utf8.ValidString(got) {
			t.Fatalf("Text(%q) = %q, not valid UTF-8", s, got)
		}
		for _, r := range got {
			if !strconv.IsPrint(r) {
				t.Fatalf("Text(%q) = %q, which holds %U", s, got, r)
			}
		}
		if again := Text(got); again != got {
			t.Fatalf("Text(Text(%q)) = %q, not %q", s, again, got)
		}
		if shown(s) != (got == s) {
			t.Fatalf("Text(%q) = %q although shown says %v", s, got, shown(s))
		}

		q := Quote(s)
		unq := strings.NewReplacer(`\\`, `\`, `\"`, `"`).Replace(q[1 : len(q)-1])
		if unq != got {
			t.Fatalf("Quote(%q) = %s escapes other than Text's %q", s, q, got)
		}
		if back, err := strconv.Unquote(q); utf8.ValidString(s) && (err != nil || back != s) {
			t.Fatalf("Unquote(Quote(%q)) = %q, %v", s, back, err)
		}

		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		j := JSON(b)
		for _, r := range string(j) {
			if !strconv.IsPrint(r) {
				t.Fatalf("JSON(%s) = %s, which holds %U", b, j, r)
			}
		}
		var before, after string
		if err := json.Unmarshal(b, &before); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(j, &after); err != nil || after != before {
			t.Fatalf("JSON(%s) = %s reads as %q, %v; want %q", b, j, after, err, before)
		}
	})
}
