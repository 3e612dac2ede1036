package testsupport

import "os"

// setTempDir makes dir the temporary folder of this process and of those
// it starts: GetTempPath2 reads TMP first, and gpuexec's default lock is
// under TEMP.
func setTempDir(dir string) error {
	if err := os.Setenv("TMP", dir); err != nil {
		return err
	}
	return os.Setenv("TEMP", dir)
}

// startRemover starts no remover on Windows, where the tests run under
// Wine in a prefix that winetest/run removes as a whole.
func startRemover(string) error { return nil }
