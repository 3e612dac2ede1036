package testsupport

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Env is this process's environment without any GPUEXEC_ variable, so that
// nothing inherited changes a gpuexec's flags, with GORACE set to end a
// race-enabled binary at once (by default the race detector sleeps a second
// at exit), and with extra appended.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(strings.ToUpper(kv), "GPUEXEC_") || strings.HasPrefix(kv, "GORACE=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	return append(env, extra...)
}

// Build runs go build on pkg (an import path, or a path relative to the
// current folder) and writes the binary to dir/name, with the ".exe" suffix
// on Windows; it returns the binary's path. It builds as a user does:
// without -race and without build tags, whatever this test binary was built
// with. An error carries the go command's output. It needs no testing.TB,
// for use in TestMain.
func Build(dir, name, pkg string) (string, error) {
	out := filepath.Join(dir, name+exeSuffix)
	cmd := exec.Command(goTool(), "build", "-o", out, pkg)
	cmd.Env = Env()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -o %s %s: %v\n%s", out, pkg, err, b)
	}
	return out, nil
}

// goTool is the go command: the one on PATH (go test puts its own
// GOROOT/bin first), else the one of the GOROOT this test was built with.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}
