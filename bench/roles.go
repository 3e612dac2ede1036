//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// roleEnv makes this program play a part in a measurement instead of
// running the benchmark: critical, hold, loop or gpujob. (As the fake
// nvidia-smi of (i) it is started through a link named nvidia-smi.)
const roleEnv = "BENCH_ROLE"

// Environment of the critical role.
const (
	truthEnv = "BENCH_TRUTH" // the file whose flock proves exclusivity
	holdEnv  = "BENCH_HOLD"  // how long to hold, a Go duration
	tagEnv   = "BENCH_TAG"   // written on the section's line
)

func runRole(role string, args []string) int {
	switch role {
	case "critical":
		return critical()
	case "hold":
		return hold()
	case "loop":
		return loop(args)
	case "gpujob":
		return gpujob()
	}
	fmt.Fprintf(os.Stderr, "bench: unknown %s %q\n", roleEnv, role)
	return 2
}

// critical is one critical section, run under the lock: it notes the time,
// takes a non-blocking exclusive flock on the truth file (failing means
// another section is inside: an overlap), holds, lets go, notes the time
// again, and appends "section START END ok|overlap TAG" (Unix ns) to stdout,
// a file opened O_APPEND, in one write.
func critical() int {
	start := time.Now().UnixNano()
	hold, err := time.ParseDuration(os.Getenv(holdEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench critical: %s: %v\n", holdEnv, err)
		return 2
	}
	f, err := os.OpenFile(os.Getenv(truthEnv), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench critical: %v\n", err)
		return 2
	}
	state := "ok"
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			fmt.Fprintf(os.Stderr, "bench critical: flock %s: %v\n", f.Name(), err)
			return 2
		}
		state = "overlap"
	}
	time.Sleep(hold)
	f.Close()
	end := time.Now().UnixNano()
	tag := os.Getenv(tagEnv)
	if tag == "" {
		tag = "-"
	}
	if _, err := fmt.Fprintf(os.Stdout, "section %d %d %s %s\n", start, end, state, tag); err != nil {
		fmt.Fprintf(os.Stderr, "bench critical: %v\n", err)
		return 2
	}
	return 0
}

// hold prints "held" and holds until stdin closes: a holder the benchmark
// releases when it is done measuring.
func hold() int {
	os.Stdout.WriteString("held\n")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// loop is a contender of the handoff measurement: it runs argv (the wrapper
// around a critical section) args[0] times in a row, each time writing
// "spawn CYCLE NS" to stdout first. argv's stdout is this stdout (a file
// opened O_APPEND), so each cycle's lines follow its spawn line. A run that
// exits 3 (the seed's tool found an overlap) is noted ("exit CYCLE 3") and
// the loop goes on; any other failure ends it with status 1.
func loop(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "bench loop: want CYCLES COMMAND [ARG...]")
		return 2
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench loop: %v\n", err)
		return 2
	}
	argv := args[1:]
	env := setEnv(os.Environ(), roleEnv, "critical")
	for i := range n {
		t := time.Now().UnixNano()
		fmt.Fprintf(os.Stdout, "spawn %d %d\n", i, t)
		cmd := command(argv, env)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Run(); err != nil {
			code := exitCode(err)
			fmt.Fprintf(os.Stdout, "exit %d %d\n", i, code)
			if code != 3 {
				fmt.Fprintf(os.Stderr, "bench loop: cycle %d: %s: %v\n", i, strings.Join(argv, " "), err)
				return 1
			}
		}
	}
	return 0
}
