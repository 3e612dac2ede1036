//go:build linux

package supervisor

import "os"

// warmUp makes the runtime's one-time checks of the kernel's pidfd support
// now, while the lock is queued for, instead of in the first fork, after it
// is taken: they fork and reap a child of their own.
func warmUp() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		p.Release()
	}
}
