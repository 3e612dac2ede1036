package lock

import (
	"errors"
	"io/fs"
	"os"
	"sort"
	"strings"
)

// existingDevices is ExistingDevices (see lock.go).
func existingDevices(path string) ([]string, error) {
	abs, err := resolve(path)
	if err != nil {
		return nil, err
	}
	dir, stem, ext := deviceName(abs)
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
