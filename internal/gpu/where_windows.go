package gpu

import (
	"os"
	"path/filepath"
)

// driverPaths are where the driver installs nvidia-smi.exe: System32 since
// the DCH drivers (about 2019), NVSMI under Program Files before.
func driverPaths() []string {
	var ps []string
	if root := os.Getenv("SystemRoot"); root != "" {
		ps = append(ps, filepath.Join(root, "System32", "nvidia-smi.exe"))
	}
	for _, v := range []string{"ProgramW6432", "ProgramFiles"} {
		if pf := os.Getenv(v); pf != "" {
			ps = append(ps, filepath.Join(pf, "NVIDIA Corporation", "NVSMI", "nvidia-smi.exe"))
		}
	}
	return ps
}
