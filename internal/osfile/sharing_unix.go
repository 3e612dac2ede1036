//go:build unix

package osfile

import "os"

// RetrySharing runs op once: Unix has no share modes, so a file another
// process has open never makes a rename, removal or chtimes fail.
func RetrySharing(op func() error) error { return op() }

// TempDir is the folder DefaultPath lives in: $TMPDIR, or /tmp.
func TempDir() string { return os.TempDir() }
