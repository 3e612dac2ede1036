//go:build unix

package lock

import "os"

// retrySharing runs op once: Unix has no share modes, so a file another
// process has open never makes a rename, removal or chtimes fail.
func retrySharing(op func() error) error { return op() }

// tempDir is the folder DefaultPath lives in: $TMPDIR, or /tmp.
func tempDir() string { return os.TempDir() }

// createShared creates path exclusively (O_RDWR|O_CREATE|O_EXCL). Unix
// lets any open file be removed; the Windows twin shares delete access.
func createShared(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
}

// openShared opens path for reading (os.Open). The Windows twin shares
// delete access.
func openShared(path string) (*os.File, error) { return os.Open(path) }
