//go:build unix

package cmdline

import "strings"

// quote is one argument as Line writes it; first says arg is the
// command's name, where a POSIX shell would take NAME=VALUE for a
// variable's assignment, and a reserved word (time, if, ...) for its
// own: such a word is quoted too.
func quote(arg string, first bool) string {
	if arg != "" && plain(arg) && !(first && (strings.Contains(arg, "=") || reserved[arg])) {
		return arg
	}
	return "'" + strings.ReplaceAll(arg, "'", `'\''`) + "'"
}

// reserved are the plain words a shell reads as its own where a command's
// name goes: POSIX sh's reserved words, and those of bash, ksh and zsh
// (bash reads `time -v job` as its time keyword, not /usr/bin/time).
var reserved = map[string]bool{
	"case": true, "do": true, "done": true, "elif": true, "else": true, "esac": true, "fi": true,
	"for": true, "if": true, "in": true, "then": true, "until": true, "while": true,
	"coproc": true, "function": true, "select": true, "time": true,
	"end": true, "foreach": true, "nocorrect": true, "repeat": true,
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
