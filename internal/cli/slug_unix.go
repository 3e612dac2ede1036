//go:build unix

package cli

import "path/filepath"

// commandName is the default --slug for a job running argv0: its base
// name ("render.py" for /opt/render/render.py).
func commandName(argv0 string) string { return filepath.Base(argv0) }
