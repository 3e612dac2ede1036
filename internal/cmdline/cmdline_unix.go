//go:build unix

package cmdline

import "strings"

// quote is one argument as Line writes it; first says arg is the
// command's name, where a POSIX shell would take NAME=VALUE for a
// variable's assignment: such a word is quoted too.
func quote(arg string, first bool) string {
	if arg != "" && plain(arg) && !(first && strings.Contains(arg, "=")) {
		return arg
	}
	return "'" + strings.ReplaceAll(arg, "'", `'\''`) + "'"
}

// plain reports whether a POSIX shell reads s, unquoted, as the word s:
// only letters, digits and @%+=:,./-_ (as Python's shlex.quote judges).
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("@%+=:,./-_", c) >= 0:
		default:
			return false
		}
	}
	return true
}
