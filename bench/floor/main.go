// Command floor is the benchmark's reference for (a): a Go program that
// links the libraries gpuexec is built on for Linux (their package inits
// run at every start, as in gpuexec: urfave/cli, hclog, x/sys; fsnotify is
// linked only on other systems, and the log file is gpuexec's own) and
// does nothing but run its argument and pass on its exit status. No
// wrapper written in Go with these libraries starts a command faster;
// gpuexec's own work is what it takes beyond this.
//
// With -lock PATH first it also does, around the command, the core of an
// uncontended gpuexec's lock work (see lock_unix.go): it catches the
// signals gpuexec catches, and takes and gives back the lock at PATH with
// the file operations that no implementation of the lock file protocol
// leaves out. What gpuexec takes beyond that is its command line, its
// checks, the rest of its lock work and its supervision.
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
	args := os.Args[1:]
	release := func() error { return nil }
	if len(args) >= 2 && args[0] == "-lock" {
		var err error
		if release, err = takeLock(args[1]); err != nil {
			os.Stderr.WriteString("floor: " + err.Error() + "\n")
			os.Exit(125)
		}
		args = args[2:]
	}
	if len(args) < 1 {
		os.Stderr.WriteString("usage: floor [-lock PATH] COMMAND [ARG...]\n")
		os.Exit(2)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	if rerr := release(); rerr != nil {
		os.Stderr.WriteString("floor: " + rerr.Error() + "\n")
		os.Exit(125)
	}
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
