package lock

import (
	"errors"
	"io/fs"
	"slices"
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
	slices.SortFunc(names, compareIndex)
	return names, nil
}

// compareIndex orders devices' names (valid indexes) by number: 2 before
// 10.
func compareIndex(a, b string) int {
	x, _ := strconv.Atoi(a)
	y, _ := strconv.Atoi(b)
	return x - y
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
