package lock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClear(t *testing.T) {
	o := testOptions(t)
	// A folder that does not exist holds no free lock (a mistyped
	// path): Clear says so, and creates nothing.
	if st, err := Clear(Options{Path: o.Path}, false); !errors.Is(err, ErrNoFolder) {
		t.Fatalf("Clear of a lock whose folder does not exist = %+v, %v; want ErrNoFolder", st, err)
	}
	if err := os.Mkdir(filepath.Dir(o.Path), 0o700); err != nil {
		t.Fatal(err)
	}
	if st, err := Clear(Options{Path: o.Path}, false); err != nil || st.State != StateFree {
		t.Fatalf("Clear on a free lock = %+v, %v", st, err)
	}
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Clear(Options{Path: o.Path}, false)
	if !errors.Is(err, ErrHeld) || st.State != StateHeld {
		t.Fatalf("Clear on a live lock = %+v, %v; want ErrHeld", st, err)
	}
	if _, err := os.Stat(o.Path); err != nil {
		t.Fatal("Clear without force removed a live lock")
	}
	if _, err := Clear(Options{Path: o.Path}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(o.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("Clear --force left the lock")
	}
	h.Release()
	writeLock(t, o.Path, deadPID(t), "0123456789abcdef")
	st, err = Clear(Options{Path: o.Path}, false)
	if err != nil || st.State != StateStale || !strings.Contains(st.Reason, "is gone") {
		t.Fatalf("Clear on a stale lock = %+v, %v", st, err)
	}
	if _, err := os.Stat(o.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("stale lock not cleared")
	}
}
