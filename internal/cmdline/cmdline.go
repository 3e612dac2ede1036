// Package cmdline writes a command's arguments as one line that the
// platform's command line reads back as the same arguments: a POSIX shell's
// on Unix, CommandLineToArgvW's (the line a Windows program is started
// with) on Windows. A log line's command can then be pasted back and run as
// it ran.
package cmdline

import "strings"

// Line is argv as one command line, its arguments separated by single
// spaces, each quoted only where it must be. On Unix a plain word (letters,
// digits and @%+=:,./-_) stays bare, and anything else, the empty argument
// too, is single-quoted, each ' in it closing the quotes, written \', and
// opening them again; the command's name is quoted also when it holds a =,
// which a shell would take for a variable's assignment, and when it is a
// shell's reserved word (time, if, ...). On Windows the line is the one Go starts the program with
// (each argument as syscall.EscapeArg writes it).
func Line(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quote(a, i == 0))
	}
	return b.String()
}
