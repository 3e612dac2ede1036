//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "bench: Linux only (it reads /proc and runs flock(1))")
	os.Exit(2)
}
