// Command gpuexec-etcd is the helper that holds etcd:// locks for gpuexec.
// gpuexec starts it when --lock names an etcd:// URL and talks to it over
// its stdin and stdout (JSON lines, a versioned protocol: see package
// etcdhelper); it is not meant to be run by hand.
//
// It is a program of its own so that the etcd client (gRPC, protobuf, zap)
// and its start-up cost stay out of gpuexec, which runs far more often with
// a lock file. Install it beside gpuexec:
//
//	go install github.com/gpuexec/gpuexec/cmd/gpuexec-etcd@latest
package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/gpuexec/gpuexec/internal/etcdhelper"
	"github.com/gpuexec/gpuexec/lock/etcdlock"
)

// init keeps main on the program's main thread, which holds the
// parent-death signal gpuexec gave the helper: Serve clears it there for a
// hold (see etcdhelper.Serve).
func init() { runtime.LockOSThread() }

func main() {
	if fi, err := os.Stdin.Stat(); len(os.Args) > 1 || err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		fmt.Fprintln(os.Stderr, "gpuexec-etcd: the helper that holds etcd:// locks for gpuexec; gpuexec starts it, it is not run by hand.\n"+
			"Use: gpuexec --lock etcd://HOST:PORT[,HOST:PORT...]/KEY -- COMMAND")
		os.Exit(2)
	}
	// The user of the lock (gpuexec) handles signals and tells this helper
	// when to let go; the helper outlives it only to release the lock. A
	// user that died leaves a broken pipe: writing to it must fail, not
	// kill the helper (SIGPIPE) before it released the lock.
	signal.Ignore(os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	// The lock is held on behalf of the process that started the helper:
	// its pid goes into the record.
	// A hold request may say that descriptor 3 is gpuexec's liveness pipe.
	os.Exit(etcdhelper.Serve(os.Stdin, os.Stdout, etcdlock.Backend{PID: os.Getppid()}, etcdhelper.InheritedLive))
}
