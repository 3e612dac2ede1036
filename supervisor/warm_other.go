//go:build !linux

package supervisor

// warmUp has nothing to prepare outside Linux (see warm_linux.go).
func warmUp() {}
