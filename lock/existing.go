package lock

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ExistingDevices names the devices whose lock files exist beside path, as
// Options.Devices names them (gpu.lock: gpu0.lock is device "0",
// gpuGPU-8f2c.lock device "GPU-8f2c"), in order (0, 1, 2, ..., 10, then
// other names): what jobs run with --gpus hold while the plain lock at
// path stays free. Only regular files whose names a device could have
// count (symbolic links and everything else in the folder are skipped,
// never followed or opened); names that differ only in case count once;
// at most 64 are returned. A folder that does not exist has none. The
// folder is resolved as for every lock (see FolderError).
func ExistingDevices(path string) ([]string, error) {
	abs, err := resolve(path)
	if err != nil {
		return nil, err
	}
	dir, file := filepath.Split(abs)
	ext := filepath.Ext(file)
	stem := strings.TrimSuffix(file, ext)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	seen := map[string]bool{}
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(n, stem) || !strings.HasSuffix(n, ext) || len(n) <= len(stem)+len(ext) {
			continue
		}
		dev := n[len(stem) : len(n)-len(ext)]
		if !validDeviceName(dev) || seen[strings.ToLower(dev)] {
			continue
		}
		seen[strings.ToLower(dev)] = true
		names = append(names, dev)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := names[i], names[j]
		if da, db := allDigits(a), allDigits(b); da != db || da && len(a) != len(b) {
			return da && (!db || len(a) < len(b))
		}
		return a < b
	})
	if len(names) > maxDevices {
		names = names[:maxDevices]
	}
	return names, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
