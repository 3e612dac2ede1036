//go:build windows

package supervisor

import (
	"os"
	"strings"
)

// foundNotExecutable reports whether name, which exec.LookPath did not
// find, is a path (not a bare command name) to something that exists: a
// folder, or a file without an executable extension (%PATHEXT%). LookPath
// reports those as "not found", but the command was found and cannot be
// run: 126, as on Unix.
func foundNotExecutable(name string) bool {
	if !strings.ContainsAny(name, `\/:`) {
		return false
	}
	_, err := os.Stat(name)
	return err == nil
}
