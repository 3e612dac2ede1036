package testsupport

import (
	"os"
	"path/filepath"
)

// OwnTempDir makes a folder for everything a test process and the
// processes it starts write, in the OS's temporary folder, named prefix and
// random characters, and makes its tmp subfolder the temporary folder of
// both (TMPDIR; TMP and TEMP on Windows): t.TempDir, os.MkdirTemp("", ...)
// and every child's temporary files, the default lock of a gpuexec run
// without --lock among them, are then inside it, never in the machine's
// temporary folder, and never on the machine's default lock. tmp is made
// as /tmp is (every user may write it, sticky) and the folder is readable
// by all, so that tests may run programs as other users there.
//
// The caller removes the folder (os.RemoveAll) once its tests have run.
// On Unix a process of its own removes it too once this one has ended,
// however it ended: go test's -timeout, a panic or a signal end a test
// process without its deferred calls, and would leave it behind. Call
// OwnTempDir from TestMain, before any test runs.
func OwnTempDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, "tmp")
	err = os.Chmod(dir, 0o755)
	if err == nil {
		err = os.Mkdir(tmp, 0o755)
	}
	if err == nil {
		err = os.Chmod(tmp, os.ModeSticky|0o777)
	}
	if err == nil {
		err = startRemover(dir)
	}
	if err == nil {
		err = setTempDir(tmp)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}
