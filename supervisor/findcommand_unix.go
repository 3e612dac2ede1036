//go:build unix

package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// notRunnable says why name, which exec.LookPath did not find, cannot be
// run although it is there; nil when it is not. A path's own trouble
// (permission denied, a folder) LookPath already reports; but searching
// PATH for a bare name it skips what cannot be run, where execvp(3), sh,
// env(1) and timeout(1) stop with EACCES, 126: a file without execute
// permission for us, a folder (".", a folder named on PATH).
func notRunnable(name string) error {
	if strings.Contains(name, "/") {
		return nil
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "." // as execvp reads an empty PATH entry
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			continue
		case fi.IsDir():
			return fmt.Errorf("%s: is a folder, not a command (%s)", name, p)
		default:
			return fmt.Errorf("%s: command found but not executable (%s)", name, p)
		}
	}
	return nil
}
