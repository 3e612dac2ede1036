// Command gpuexec runs a command while holding a cross-process GPU lock, so
// that independent programs share one GPU without two jobs on the card at
// once. See README.md; the command line itself is package internal/cli.

// gpuexec runs for milliseconds of CPU and needs one core at most: skip the
// runtime's cgroup reads for GOMAXPROCS and its periodic re-check.
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
package main

import (
	"io"
	"os"

	"github.com/gpuexec/gpuexec/internal/cli"
	"github.com/gpuexec/gpuexec/supervisor"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module version go install recorded, or "dev".
var version = ""

func main() {
	// gpuexec started again as a job's terminal sentinel: that alone.
	if supervisor.IsSentinel(os.Args) {
		os.Exit(supervisor.RunSentinel())
	}
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is gpuexec with its arguments and output streams; it returns the exit
// status.
func run(args []string, stdout, stderr io.Writer) int {
	cli.Version = version
	return cli.Run(args, stdout, stderr)
}
