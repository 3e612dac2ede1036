package cli

import (
	"debug/buildinfo"
	"strings"
	"testing"
)

// notInJobBinary are the modules the gpuexec binary, which every job runs
// through, must not link: their package inits run at every start of every
// job (protobuf's opens and reads the executable; client_golang's
// registers collectors), costing each job milliseconds, and with few file
// descriptors (ulimit -n 5) the Go runtime dies in them before gpuexec
// can say why. The etcd client lives in cmd/gpuexec-etcd for this;
// `gpuexec metrics` writes Prometheus' text format with its own encoder.
var notInJobBinary = []string{
	"google.golang.org/protobuf",
	"google.golang.org/grpc",
	"go.etcd.io/etcd/",
	"github.com/prometheus/client_golang",
	"github.com/prometheus/client_model",
	"github.com/prometheus/common",
}

// The gpuexec binary the tests run (built as a user builds it) links none
// of notInJobBinary, as its build info lists its modules.
func TestMetricsNotInJobBinary(t *testing.T) {
	t.Parallel()
	bi, err := buildinfo.ReadFile(gpuexecBin)
	if err != nil {
		t.Fatal(err)
	}
	if len(bi.Deps) == 0 {
		t.Fatalf("%s lists no module: its build info is not that of a module build", gpuexecBin)
	}
	for _, d := range bi.Deps {
		for _, bad := range notInJobBinary {
			if d.Path == bad || strings.HasPrefix(d.Path, bad) && (strings.HasSuffix(bad, "/") || d.Path[len(bad)] == '/') {
				t.Errorf("the gpuexec binary links %s %s: keep it out of the binary every job runs (a test or another command may use it)", d.Path, d.Version)
			}
		}
	}
}
