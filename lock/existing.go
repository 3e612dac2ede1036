package lock

import (
	"errors"
	"io/fs"
	"sort"
	"strconv"
)

// existingDevices is ExistingDevices (see lock.go).
func existingDevices(path string) ([]string, error) {
	if err := checkFilePath(path); err != nil {
		return nil, err
	}
	abs, err := safeLockPath(path)
	if err != nil {
		return nil, err
	}
	_, names, err := devicesBeside(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sort.Slice(names, func(i, j int) bool {
		a, _ := strconv.Atoi(names[i])
		b, _ := strconv.Atoi(names[j])
		return a < b
	})
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
