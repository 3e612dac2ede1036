//go:build !unix

package main

import "errors"

// takeLock is Unix only, as the benchmark is.
func takeLock(string) (func() error, error) {
	return nil, errors.New("-lock is Unix only")
}
