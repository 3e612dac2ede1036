package cli

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gpuexec/gpuexec/internal/etcdhelper"
	"github.com/gpuexec/gpuexec/lock"
)

// --lock means one backend, chosen once: an etcd:// URL is the etcd
// helper's, kept as written, never a lock file (lock files take any path);
// a path is lock files', made absolute; an empty one, or one shaped like
// another URL (a mistyped etcd URL), is refused before anything is made.
func TestLockBackend(t *testing.T) {
	t.Chdir(t.TempDir())
	cwd, _ := filepath.Abs(".")
	for _, tc := range []struct {
		lock    string
		path    string
		backend lock.Backend
		refusal string
	}{
		{"etcd://127.0.0.1:2379/gpuexec/test", "etcd://127.0.0.1:2379/gpuexec/test", etcdhelper.Backend{}, ""},
		{"gpu.lock", filepath.Join(cwd, "gpu.lock"), lock.Files, ""},
		{"./host:2379/gpu.lock", filepath.Join(cwd, "host:2379", "gpu.lock"), lock.Files, ""},
		{"", "", nil, "--lock must not be empty"},
		{"http://127.0.0.1:2379/gpuexec/x", "", nil, `--lock "http://127.0.0.1:2379/gpuexec/x" is shaped like a URL or HOST:PORT`},
		{"etcd:/h:2379/k", "", nil, `--lock "etcd:/h:2379/k" is shaped like a URL or HOST:PORT`},
	} {
		set := flag.NewFlagSet("gpuexec", flag.ContinueOnError)
		set.String("lock", tc.lock, "")
		path, b, err := lockBackend(cli.NewContext(cli.NewApp(), set, nil))
		switch {
		case tc.refusal != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.refusal)):
			t.Errorf("lockBackend(%q) = %q, %v, %v; want refused with %q", tc.lock, path, b, err, tc.refusal)
		case tc.refusal == "" && (err != nil || path != tc.path || b != tc.backend):
			t.Errorf("lockBackend(%q) = %q, %#v, %v; want %q, %#v", tc.lock, path, b, err, tc.path, tc.backend)
		}
	}
}
