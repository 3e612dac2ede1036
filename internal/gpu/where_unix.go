//go:build !windows

package gpu

// driverPaths are where a driver installs nvidia-smi when it is not on
// PATH (a cron job's or a service's PATH is short).
func driverPaths() []string {
	return []string{"/usr/bin/nvidia-smi", "/usr/local/bin/nvidia-smi", "/usr/lib/wsl/lib/nvidia-smi"}
}
