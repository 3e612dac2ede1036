//go:build !linux

package supervisor

import "os"

// runSentinel: no sentinel is started outside Linux, so whoever runs one
// runs it by hand.
func runSentinel() int {
	os.Stderr.WriteString(SentinelArg + " is what gpuexec starts in a job's process group on Linux; it is not run by hand\n")
	return ExitFailed
}
