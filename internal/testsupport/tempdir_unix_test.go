//go:build unix

package testsupport

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ownTempDirEnv makes this test binary, run as TestOwnTempDirHelper, make
// its own folder with OwnTempDir, print it and run until killed.
const ownTempDirEnv = "GPUEXEC_TESTSUPPORT_OWN_TEMP_DIR"

func TestOwnTempDirHelper(t *testing.T) {
	if os.Getenv(ownTempDirEnv) != "1" {
		t.Skip("a helper process of TestOwnTempDirGoesWithAKilledProcess")
	}
	dir, err := OwnTempDir("own-")
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString(dir + " " + os.TempDir() + "\n")
	time.Sleep(time.Minute)
}

// A test process that OwnTempDir gave a folder, and its children, write
// their temporary files there; killed outright (as go test's -timeout or a
// signal ends one), it leaves nothing.
func TestOwnTempDirGoesWithAKilledProcess(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOwnTempDirHelper$")
	cmd.Env = Env(ownTempDirEnv+"=1", "TMPDIR="+tmp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the helper printed %q: %v", line, err)
	}
	dir, temp, _ := strings.Cut(strings.TrimSpace(line), " ")
	if filepath.Dir(dir) != tmp || temp != filepath.Join(dir, "tmp") {
		t.Fatalf("OwnTempDir made %s with the temporary folder %s; want a folder in %s, and its tmp", dir, temp, tmp)
	}
	if fi, err := os.Stat(temp); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Fatalf("%s: %v %v; want a sticky folder every user may write", temp, fi, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	Await(t, 20*time.Second, "the killed process's folder to be removed", func() bool {
		_, err := os.Lstat(dir)
		return os.IsNotExist(err)
	})
}
