//go:build !linux

package supervisor

// runSentinel: no sentinel is started outside Linux.
func runSentinel() int { return 0 }
