//go:build windows

package cmdline

import "syscall"

// quote is one argument as Line writes it: as Go starts a Windows program
// with it, for CommandLineToArgvW to read back (first changes nothing).
func quote(arg string, first bool) string { return syscall.EscapeArg(arg) }
