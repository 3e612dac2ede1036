package lock

import (
	"path/filepath"
	"testing"
)

func TestOwnFile(t *testing.T) {
	dir := filepath.Join(string(filepath.Separator)+"l", "locks")
	lk := filepath.Join(dir, "gpu.lock")
	for _, c := range []struct {
		path string
		own  bool
	}{
		{lk, true},
		{lk + guardSuffix, true},
		{livePath(lk, "abc"), true},
		{sharePath(lk, "abc"), true},
		{lk + ticketSuffix + "0001-x", true},
		{filepath.Join(dir, "gpu3.lock"), true},
		{filepath.Join(dir, "gpu3.lock") + guardSuffix, true},
		{filepath.Join(dir, ".", "gpu.lock"), true},
		{lk + ".journal", false},
		{lk + ".jsonl", false},
		{filepath.Join(dir, "gpu.lock-2026-12-01T00-00-00.000.journal"), false},
		{filepath.Join(dir, "other.lock"), false},
		{filepath.Join(dir, "other3.lock"), false},
		{filepath.Join(dir, "gpu.lock.ticket-x", "y"), false},
	} {
		if got := OwnFile(lk, c.path); got != c.own {
			t.Errorf("OwnFile(%q, %q) = %v, want %v", lk, c.path, got, c.own)
		}
	}
}
