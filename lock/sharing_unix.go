//go:build unix

package lock

import "os"

// retrySharing runs op once: Unix has no share modes, so a file another
// process has open never makes a rename, removal or chtimes fail.
func retrySharing(op func() error) error { return op() }

// tempDir is the folder DefaultPath lives in: $TMPDIR, or /tmp.
func tempDir() string { return os.TempDir() }
