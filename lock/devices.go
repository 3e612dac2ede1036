package lock

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// maxDevices bounds Options.Devices: the largest machines hold 16 GPUs;
// each device is a lock file and a guard, checked at every try.
const maxDevices = 64

// maxDeviceName bounds a device's name: a GPU UUID is 40 characters.
const maxDeviceName = 128

// deviceFile is the lock file of device n beside the lock at path.
func deviceFile(path, n string) string {
	dir, stem, ext := deviceName(path)
	return filepath.Join(dir, stem+n+ext)
}

// deviceName splits a lock path into what names its devices' lock files:
// the folder, and the name's stem and extension between which a device's
// name goes (gpu.lock → gpu0.lock).
func deviceName(path string) (dir, stem, ext string) {
	dir, file := filepath.Split(path)
	ext = filepath.Ext(file)
	return dir, strings.TrimSuffix(file, ext), ext
}

// checkDevices checks a device list: 1 to maxDevices names, each a device
// index (see validIndex), none twice.
func checkDevices(names []string) error {
	if len(names) > maxDevices {
		return &OptionError{Option: "devices", Problem: fmt.Sprintf("names %d devices: at most %d", len(names), maxDevices)}
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if !validIndex(n) {
			return &OptionError{Option: "devices", Problem: notIndex(n)}
		}
		if seen[n] {
			return &OptionError{Option: "devices", Problem: fmt.Sprintf("names device %s twice", n)}
		}
		seen[n] = true
	}
	return nil
}

// notIndex says why n names no device's lock.
func notIndex(n string) string {
	switch {
	case allDigits(n) && len(n) > 1 && n[0] == '0':
		return fmt.Sprintf("names %q: write the index without leading zeros (%s), one lock per card", n, strings.TrimLeft(n[:len(n)-1], "0")+n[len(n)-1:])
	case allDigits(n):
		return fmt.Sprintf("names device %s: an index is at most %d", n, maxIndex)
	case strings.HasPrefix(strings.ToUpper(n), "GPU-") || strings.HasPrefix(strings.ToUpper(n), "MIG-"):
		return fmt.Sprintf("names %q, a UUID: a device's lock is named by its index (nvidia-smi's), so that one card is one lock", SafeName(n))
	}
	return fmt.Sprintf("names %q, which is not a GPU index (0, 1, 2, ...)", SafeName(n))
}

func parseDevices(list string, count int) ([]string, error) {
	if list == "all" {
		if count < 1 {
			return nil, &OptionError{Option: "devices", Problem: "all needs a device count of at least 1"}
		}
		if count > maxDevices {
			return nil, &OptionError{Option: "devices", Problem: fmt.Sprintf("all means %d devices: at most %d", count, maxDevices)}
		}
		names := make([]string, count)
		for i := range names {
			names[i] = strconv.Itoa(i)
		}
		return names, nil
	}
	if k := strings.Count(list, ",") + 1; k > maxDevices {
		return nil, &OptionError{Option: "devices", Problem: fmt.Sprintf("names %d devices: at most %d", k, maxDevices)}
	}
	names := strings.Split(list, ",")
	for i, n := range names {
		n = strings.TrimSpace(n)
		// 07 is 7: one card, one lock.
		if allDigits(n) && len(n) <= 3 {
			k, _ := strconv.Atoi(n)
			n = strconv.Itoa(k)
		}
		names[i] = n
	}
	return names, checkDevices(names)
}

// maxIndex is the largest device index a device's lock is named by:
// maxDevices devices, numbered from 0.
const maxIndex = maxDevices - 1

// validIndex reports whether n is a device's name as Options.Devices takes
// it: an index in decimal without leading zeros, at most maxIndex.
func validIndex(n string) bool {
	if n == "" || len(n) > 1 && n[0] == '0' || !allDigits(n) {
		return false
	}
	i, err := strconv.Atoi(n)
	return err == nil && i <= maxIndex
}

// deviceLock is what Options.Canonical reads a path as: a device's lock
// beside another lock (gpu1.lock: device "1" of gpu.lock), when its name
// ends in a device's index before its extension, after a name of at least
// one character that does not end in a digit.
func deviceLock(path string) (lockPath, device string, ok bool) {
	dir, stem, ext := deviceName(path)
	head, dev := trailingDigits(stem)
	if head == "" || !validIndex(dev) {
		return "", "", false
	}
	return filepath.Join(dir, head+ext), dev, true
}

// misspelledDevice reports the index a lock path names with leading zeros
// (gpu07.lock: "7"), which would be a lock of its own beside gpu7.lock.
func misspelledDevice(path string) (string, bool) {
	_, stem, _ := deviceName(path)
	head, digits := trailingDigits(stem)
	if head == "" || len(digits) < 2 || digits[0] != '0' {
		return "", false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n > maxIndex {
		return "", false
	}
	return strconv.Itoa(n), true
}

// trailingDigits splits s into what comes before the decimal digits it
// ends in, and those digits.
func trailingDigits(s string) (head, digits string) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	return s[:i], s[i:]
}

// deviceOf reads a file name as one of a device's lock files beside a lock
// whose name is stem+ext: stem, the device's index, ext, then tail (""
// for the lock file itself).
func deviceOf(stem, ext, name string) (dev, tail string, ok bool) {
	rest, ok := strings.CutPrefix(name, stem)
	if !ok {
		return "", "", false
	}
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	dev = rest[:i]
	tail, ok = strings.CutPrefix(rest[i:], ext)
	return dev, tail, ok && validIndex(dev)
}

// devicesBeside are the devices whose locks beside the lock at lockPath are
// there, or have left something there (a liveness file, a sidecar, a file
// set aside: a job whose record was removed may still run), as lock paths in
// guard order with their device names. Names alone decide: nothing is
// opened, and only regular files count.
func devicesBeside(lockPath string) (paths, names []string, err error) {
	dir, stem, ext := deviceName(lockPath)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	for _, e := range ents {
		dev, tail, ok := deviceOf(stem, ext, e.Name())
		if !ok || !e.Type().IsRegular() || seen[dev] || !lockOrLeftover(tail) {
			continue
		}
		seen[dev] = true
		paths = append(paths, filepath.Join(dir, stem+dev+ext))
		names = append(names, dev)
	}
	t := lockSet{paths: paths}
	order := t.guardOrder()
	sp, sn := make([]string, len(order)), make([]string, len(order))
	for k, i := range order {
		sp[k], sn[k] = paths[i], names[i]
	}
	return sp, sn, nil
}

// lockOrLeftover reports whether what follows a lock file's name in a file
// name (tail) makes it the lock file itself ("") or something its holders
// leave beside it: a liveness file, a sidecar, a file set aside.
func lockOrLeftover(tail string) bool {
	for _, p := range []string{liveSuffix, shareSuffix, stalePart, tmpPart} {
		if strings.HasPrefix(tail, p) {
			return true
		}
	}
	return tail == ""
}

// besideLock reports whether path is a device's lock beside the lock at
// lockPath, or one of its liveness files, by name.
func besideLock(lockPath, path string) bool {
	dir, stem, ext := deviceName(lockPath)
	if filepath.Clean(dir) != filepath.Dir(path) {
		return false
	}
	_, tail, ok := deviceOf(stem, ext, filepath.Base(path))
	return ok && (tail == "" || strings.HasPrefix(tail, liveSuffix))
}
