// Package escape makes text that other users wrote safe to show: a lock
// record's owner, a queue ticket, a process name nvidia-smi reports. Such
// text may hold newlines, terminal escape sequences, bidirectional
// overrides (U+202E) or invalid UTF-8, which would act on the terminal
// that shows it or forge a line of output.
//
// The rule is Go's own: a rune is shown as it is when strconv.IsPrint
// says it is printable (letters, marks, numbers, punctuation, symbols and
// the ASCII space); every other rune, and every byte that is not valid
// UTF-8, is written as an escape. Text, Quote and JSON apply that one
// rule in three syntaxes.
package escape

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Text is s with each rune that is not printable written as Go writes it
// in a quoted string (\n, \t, \x1b, \x7f, \u0085, \u202e, \U000e0001) and
// each byte that is not valid UTF-8 as \x and two hex digits (\xff).
// Printable runes, the backslash among them, are kept as they are.
//
// The result is valid UTF-8 of printable runes only, and Text of it is
// itself: text already escaped is left alone. Different inputs may give
// the same result (a literal `\n` and a newline both give `\n`): Text is
// for showing, not for reading back.
func Text(s string) string {
	if shown(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteString(`\x`)
			b.WriteByte(hex[s[i]>>4])
			b.WriteByte(hex[s[i]&0xf])
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRuneToASCII(r) // '\n', '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

const hex = "0123456789abcdef"

// shown reports whether s is valid UTF-8 of printable runes only.
func shown(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				return false
			}
		}
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// Quote is s as a Go double-quoted string literal: the runes and bytes
// that Text escapes are escaped the same way, and so are the double quote
// and the backslash, so that strconv.Unquote gives s back when s is valid
// UTF-8.
func Quote(s string) string {
	return strconv.Quote(s)
}

// JSON is b, compact JSON text as encoding/json's Marshal writes it, with
// each rune that Text would escape written as a JSON \u escape instead
// (a UTF-16 surrogate pair above U+FFFF), so that it stays the same JSON
// value. encoding/json escapes control characters below U+0020 but passes
// DEL, C1 controls and format characters (U+202E) through. A byte of b
// that is not valid UTF-8 becomes U+FFFD, as encoding/json reads it.
//
// The result holds printable runes only.
func JSON(b []byte) []byte {
	s := string(b)
	if shown(s) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for _, r := range s {
		if strconv.IsPrint(r) {
			out = utf8.AppendRune(out, r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			out = append(out, '\\', 'u', hex[u>>12], hex[u>>8&0xf], hex[u>>4&0xf], hex[u&0xf])
		}
	}
	return out
}
