//go:build windows

package cli

// enoughFiles is nil: Windows has no small per-process limit on handles
// (see files_unix.go).
func enoughFiles() error { return nil }
