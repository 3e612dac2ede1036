//go:build windows

package supervisor

import (
	"fmt"
	"os"
	"strings"
)

// notRunnable says why name, which exec.LookPath did not find, cannot be
// run although it is there; nil when it is not. It is when name is a path
// (not a bare command name) to something that exists: a folder, or a file
// without an executable extension (%PATHEXT%). LookPath reports those as
// "not found", but the command was found and cannot be run: 126, as on
// Unix.
func notRunnable(name string) error {
	if !strings.ContainsAny(name, `\/:`) {
		return nil
	}
	if _, err := os.Stat(name); err != nil {
		return nil
	}
	return fmt.Errorf("%s: command found but not executable", name)
}
