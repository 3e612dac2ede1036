// Command floor is the benchmark's reference for (a): a Go program that
// links the libraries gpuexec is built on for Linux (their package inits
// run at every start, as in gpuexec: urfave/cli, hclog, x/sys; fsnotify is
// linked only on other systems, and the log file is gpuexec's own) and
// does nothing but run its argument and pass on its exit status. No
// wrapper written in Go with these libraries starts a command faster;
// gpuexec's own work is what it takes beyond this.
package main

import (
	"errors"
	"os"
	"os/exec"

	_ "github.com/hashicorp/go-hclog"
	_ "github.com/urfave/cli/v2"
	_ "golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		os.Stderr.WriteString("usage: floor COMMAND [ARG...]\n")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		os.Exit(ee.ExitCode())
	default:
		os.Stderr.WriteString("floor: " + err.Error() + "\n")
		os.Exit(127)
	}
}
