//go:build windows

package cli

import (
	"path/filepath"
	"strings"
)

// commandName is the default --slug for a job running argv0: its base name
// without the extension that only says it is a program or script
// ("blender" for C:\Program Files\Blender\blender.exe), as a Unix job
// would be named. Any other extension is kept ("render.py").
func commandName(argv0 string) string {
	name := filepath.Base(argv0)
	ext := filepath.Ext(name)
	switch strings.ToLower(ext) {
	case ".exe", ".com", ".bat", ".cmd", ".ps1":
		if stem := strings.TrimSuffix(name, ext); stem != "" {
			return stem
		}
	}
	return name
}
