package cli

// gpuexec top without a terminal: one frame, printed as text.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/journal"
)

// Without a terminal on stdout top prints one frame and exits 0: the lock,
// the queue, the cards and the last jobs, hostile journal text escaped,
// what is not a record set aside.
func TestTopWithoutATerminal(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := newCard(t, frame(rtx3080(1024)))
	ended := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var lines strings.Builder
	for i := range 12 {
		lines.WriteString(journalLine(t, "me", "ep"+string(rune('a'+i)), journal.OK, 0, 10*time.Second, 50*time.Second, ended.Add(time.Duration(i)*time.Minute)))
	}
	lines.WriteString(journalLine(t, "evil\x1b[2J\x1b]0;x\x07", "<script>\n", journal.Failed, 3, 10*time.Second, 50*time.Second, ended.Add(time.Hour)))
	lines.WriteString("not json\n")
	if err := os.WriteFile(lock+".journal", []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r := gx(t, c.env(), "top", "--lock", lock)
	wantCode(t, r, 0)
	for _, want := range []string{
		"  " + lock + "\n",
		"\nlock: free\n", "\nqueue: empty\n",
		"\nGPU 0 NVIDIA GeForce RTX 3080\n", "1.0 GiB of 10.0 GiB used\n", "\n  no process\n",
		"\nlast jobs:\n", " me/epl waited 10s held 50s\n",
		` evil\x1b[2J\x1b]0;x\a/<script>\n waited 10s held 50s`,
		"\n  1 journal line(s) set aside (not records)\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("no %q in stdout:\n%s", want, r.stdout)
		}
	}
	// The last 10 jobs only.
	if strings.Contains(r.stdout, "me/epc ") || !strings.Contains(r.stdout, "me/epd ") {
		t.Errorf("not the last 10 jobs:\n%s", r.stdout)
	}
	if strings.ContainsAny(r.stdout, "\x1b\x07") || strings.Contains(r.stdout, "(q quits)") {
		t.Errorf("stdout:\n%q", r.stdout)
	}
	if r.stderr != "" {
		t.Errorf("stderr:\n%s", r.stderr)
	}

	// A lock folder that does not exist is a mistyped --lock, as for
	// status: 125.
	r = gx(t, c.env(), "top", "--lock", filepath.Join(t.TempDir(), "none", "gpu.lock"))
	wantCode(t, r, 125)
	if !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("stderr:\n%s", r.stderr)
	}
	r = gx(t, c.env(), "top", "--lock", lock, "--interval", "0")
	wantCode(t, r, 125)
}
