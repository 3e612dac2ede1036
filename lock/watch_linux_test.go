package lock

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWakerWakesEveryoneWhenTheFolderGoes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "locks")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lockPath := filepath.Join(dir, "gpu.lock")
	k, err := newWaker(lockPath, []string{lockPath})
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	if err := os.Rename(dir, dir+"-moved"); err != nil {
		t.Fatal(err)
	}
	awaitWake(t, k.C(), "the lock's folder moved away")
	awaitWake(t, k.Left(), "the lock's folder moved away")
}
