//go:build windows

package safepath

import (
	"io/fs"
	"os"
	"path/filepath"
)

// Dir returns dir as it is, creating it when create is not 0 (its mode
// is the ACL's business here). Who may
// change a folder on Windows is its ACL's business, which gpuexec does not
// judge; the default folder is under each user's own %TEMP%.
func Dir(dir string, create fs.FileMode, private bool) (string, error) {
	dir = filepath.Clean(dir)
	if create != 0 {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return "", err
		}
	}
	return dir, nil
}
