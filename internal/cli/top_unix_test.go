//go:build unix

package cli

// gpuexec top in a pseudo-terminal: what it draws, as a terminal shows it
// (see vt), its refresh, and its quit keys.

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// vt is a terminal's screen as far as gpuexec top draws on it with
// TERM=xterm: printable text at the cursor, cursor moves (CUP, CUU, CUD,
// CUF, CUB, CHA, VPA), erase in line and display, erase characters; every
// other sequence (colours, modes, titles) is read and ignored. It is fed
// what the pty's master reads.
type vt struct {
	mu         sync.Mutex
	rows, cols int
	cells      [][]rune
	x, y       int
	pending    []byte // an escape sequence or rune cut by a read
	raw        strings.Builder
}

func newVT(rows, cols int) *vt {
	v := &vt{rows: rows, cols: cols}
	v.clear(0, 0, rows, cols)
	return v
}

func (v *vt) clear(y0, x0, y1, x1 int) {
	if v.cells == nil {
		v.cells = make([][]rune, v.rows)
		for i := range v.cells {
			v.cells[i] = make([]rune, v.cols)
		}
	}
	for y := max(y0, 0); y < min(y1, v.rows); y++ {
		for x := max(x0, 0); x < min(x1, v.cols); x++ {
			v.cells[y][x] = ' '
		}
	}
}

func (v *vt) copy(f *os.File) {
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		v.write(buf[:n])
		if err != nil {
			return
		}
	}
}

func (v *vt) write(b []byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.raw.Write(b)
	b = append(v.pending, b...)
	v.pending = nil
	for len(b) > 0 {
		n := v.step(b)
		if n == 0 { // incomplete: wait for more
			v.pending = append([]byte(nil), b...)
			return
		}
		b = b[n:]
	}
}

// step interprets the start of b and says how many bytes it took; 0 when
// b holds only the start of a sequence or rune.
func (v *vt) step(b []byte) int {
	switch c := b[0]; {
	case c == 0x1b:
		if len(b) < 2 {
			return 0
		}
		switch b[1] {
		case '[':
			i := 2
			for i < len(b) && (b[i] < 0x40 || b[i] > 0x7e) {
				i++
			}
			if i == len(b) {
				return 0
			}
			v.csi(string(b[2:i]), b[i])
			return i + 1
		case ']', 'P', '_', '^': // OSC, DCS...: to BEL or ST
			for i := 2; i < len(b); i++ {
				if b[i] == 0x07 {
					return i + 1
				}
				if b[i] == 0x1b && i+1 < len(b) && b[i+1] == '\\' {
					return i + 2
				}
			}
			return 0
		case '(', ')', '*', '+', '#':
			if len(b) < 3 {
				return 0
			}
			return 3
		}
		return 2
	case c == '\r':
		v.x = 0
	case c == '\n':
		v.y = min(v.y+1, v.rows-1)
	case c == '\b':
		v.x = max(v.x-1, 0)
	case c < 0x20 || c == 0x7f:
	default:
		if !utf8.FullRune(b) {
			return 0
		}
		r, n := utf8.DecodeRune(b)
		if v.x < v.cols && v.y < v.rows {
			v.cells[v.y][v.x] = r
		}
		v.x++
		return n
	}
	return 1
}

func (v *vt) csi(params string, final byte) {
	params = strings.TrimLeft(params, "?>=<")
	var ns []int
	for _, p := range strings.Split(params, ";") {
		n, _ := strconv.Atoi(p)
		ns = append(ns, n)
	}
	arg := func(i, def int) int {
		if i < len(ns) && ns[i] > 0 {
			return ns[i]
		}
		return def
	}
	switch final {
	case 'H', 'f':
		v.y, v.x = min(arg(0, 1)-1, v.rows-1), min(arg(1, 1)-1, v.cols-1)
	case 'A':
		v.y = max(v.y-arg(0, 1), 0)
	case 'B':
		v.y = min(v.y+arg(0, 1), v.rows-1)
	case 'C':
		v.x = min(v.x+arg(0, 1), v.cols-1)
	case 'D':
		v.x = max(v.x-arg(0, 1), 0)
	case 'G':
		v.x = min(arg(0, 1)-1, v.cols-1)
	case 'd':
		v.y = min(arg(0, 1)-1, v.rows-1)
	case 'X':
		v.clear(v.y, v.x, v.y+1, v.x+arg(0, 1))
	case 'K':
		switch arg(0, 0) {
		case 0:
			v.clear(v.y, v.x, v.y+1, v.cols)
		case 1:
			v.clear(v.y, 0, v.y+1, v.x+1)
		case 2:
			v.clear(v.y, 0, v.y+1, v.cols)
		}
	case 'J':
		switch arg(0, 0) {
		case 0:
			v.clear(v.y, v.x, v.y+1, v.cols)
			v.clear(v.y+1, 0, v.rows, v.cols)
		case 1:
			v.clear(0, 0, v.y, v.cols)
			v.clear(v.y, 0, v.y+1, v.x+1)
		default:
			v.clear(0, 0, v.rows, v.cols)
		}
	}
}

// screen is what the terminal shows now, a line per row, trailing spaces
// cut.
func (v *vt) screen() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	lines := make([]string, v.rows)
	for y, row := range v.cells {
		lines[y] = strings.TrimRight(string(row), " ")
	}
	return strings.Join(lines, "\n")
}

// topInTerminal is gpuexec top running in a pseudo-terminal.
type topInTerminal struct {
	cmd    *exec.Cmd
	tty    *os.File
	vt     *vt
	exited chan struct{}
}

const topRows, topCols = 30, 110

// startTop starts gpuexec top with env and args in a pseudo-terminal of
// topRows by topCols; it is killed at the test's end. A machine without
// pseudo-terminals skips the test.
func startTop(t *testing.T, env []string, args ...string) *topInTerminal {
	t.Helper()
	cmd := gpuexecCmd(append([]string{"TERM=xterm"}, env...), append([]string{"top"}, args...)...)
	cmd.Dir = t.TempDir()
	tty, exited := startInPTY(t, cmd, &pty.Winsize{Rows: topRows, Cols: topCols})
	r := &topInTerminal{cmd: cmd, tty: tty, vt: newVT(topRows, topCols), exited: exited}
	go r.vt.copy(tty)
	return r
}

// awaitScreen waits until the screen shows each of want.
func (r *topInTerminal) awaitScreen(t *testing.T, want ...string) {
	t.Helper()
	ok := testsupport.Poll(long, func() bool {
		s := r.vt.screen()
		for _, w := range want {
			if !strings.Contains(s, w) {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("the screen never showed %q; it shows:\n%s", want, r.vt.screen())
	}
}

// quit types key and waits for top to exit 0.
func (r *topInTerminal) quit(t *testing.T, key string) {
	t.Helper()
	if _, err := r.tty.WriteString(key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.exited:
	case <-time.After(long):
		t.Fatalf("top still runs %s after %q; the screen shows:\n%s", long, key, r.vt.screen())
	}
	if code := r.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("top exited %d (%s) on %q, want 0", code, r.cmd.ProcessState, key)
	}
}

// top shows the holder with its deadline, the queue, the cards from
// nvidia-smi with their processes attributed, redraws when the holder
// changes, and quits on q with status 0, the terminal given back.
func TestTopInATerminal(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	alphaPID := fmt.Sprintf("%s/alpha.pid", t.TempDir())
	foreign := testsupport.DeadPID(t)
	c := newCard(t, frame(rtx3080(6000),
		gputest.App{GPU: gputest.UUID0, PIDFile: alphaPID, Name: "/usr/bin/python3", Used: "4096"},
		gputest.App{GPU: gputest.UUID0, PID: foreign, Name: "/usr/bin/Xorg", Used: "512"}))

	alpha, pids := startShellJob(t, c.env(), []string{"--lock", lock, "--owner", "me", "--slug", "alpha", "--timeout", "1h"},
		`echo $$ > "$READY"; exec sleep 60`)
	if err := testsupport.WriteAtomic(alphaPID, []byte(strconv.Itoa(pids[0]))); err != nil {
		t.Fatal(err)
	}
	bravoReady := fmt.Sprintf("%s/bravo.ready", t.TempDir())
	bravo := startProc(t, gpuexecCmd(c.env("READY="+bravoReady), "--lock", lock, "--owner", "you", "--slug", "bravo", "--wait", "1m",
		"--", "sh", "-c", `echo $$ > "$READY"; exec sleep 60`))
	testsupport.Await(t, long, "bravo to queue", func() bool { return queueLen(t, lock) == 1 })

	r := startTop(t, c.env(), "--lock", lock)
	r.awaitScreen(t,
		fmt.Sprintf("lock: held by me/alpha (pid %d) for ", alpha.pid()), ", deadline ",
		"queue (1):", "  1. you/bravo (pid ",
		"GPU 0 NVIDIA GeForce RTX 3080",
		" 5.9 GiB of 10.0 GiB used",
		fmt.Sprintf("pid %d sleep (4.0 GiB) under gpuexec me/alpha (pid %d)", pids[0], alpha.pid()),
		fmt.Sprintf("pid %d ? (512 MiB) not under gpuexec", foreign),
		"  no journal yet at ")

	// alpha ends; bravo takes the lock: top shows it.
	if err := syscall.Kill(pids[0], syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	bravoJob := testsupport.AwaitPIDs(t, long, bravoReady)[0]
	testsupport.KillOnCleanup(t, bravoJob)
	r.awaitScreen(t, "lock: held by you/bravo (pid ", "queue: empty")
	if strings.Contains(r.vt.screen(), "held by me/alpha") {
		t.Errorf("the old holder is still shown:\n%s", r.vt.screen())
	}

	// A smaller terminal: the frame is drawn again at once, cut to it.
	if err := pty.Setsize(r.tty, &pty.Winsize{Rows: 6, Cols: 40}); err != nil {
		t.Fatal(err)
	}
	ok := testsupport.Poll(long, func() bool {
		rows := strings.Split(r.vt.screen(), "\n")
		return strings.HasSuffix(rows[0], "…") && utf8.RuneCountInString(rows[0]) == 40 &&
			strings.HasPrefix(rows[5], "… ") && strings.HasSuffix(rows[5], "…") && rows[6] == ""
	})
	if !ok {
		t.Fatalf("not cut to 40x6 after the resize:\n%s", r.vt.screen())
	}
	r.quit(t, "q")
	wantCode(t, alpha.wait(t), 143)
	if err := syscall.Kill(bravoJob, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantCode(t, bravo.wait(t), 143)
}

// SIGTERM (or SIGHUP: the ssh session gone) ends top with 128+N, the
// terminal given back: the alternate screen left.
func TestTopEndsOnSIGTERM(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := startTop(t, newCard(t, frame(rtx3080(0))).env(), "--lock", lock)
	r.awaitScreen(t, "lock: free")
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.exited:
	case <-time.After(long):
		t.Fatalf("top still runs %s after SIGTERM", long)
	}
	if code := r.cmd.ProcessState.ExitCode(); code != 143 {
		t.Errorf("top exited %d (%s) on SIGTERM, want 143", code, r.cmd.ProcessState)
	}
	// tcell leaves the alternate screen (rmcup) as it finalises.
	testsupport.Await(t, long, "the terminal given back", func() bool {
		r.vt.mu.Lock()
		defer r.vt.mu.Unlock()
		return strings.Contains(r.vt.raw.String(), "\x1b[?1049l")
	})
}

// Each quit key ends top with status 0: q, Q, Esc, Ctrl+C.
func TestTopQuitKeys(t *testing.T) {
	t.Parallel()
	for _, k := range []struct{ name, key string }{{"q", "q"}, {"Q", "Q"}, {"Esc", "\x1b"}, {"Ctrl+C", "\x03"}} {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			dir, lock := lockIn(t)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			c := newCard(t, frame(rtx3080(0)))
			r := startTop(t, c.env(), "--lock", lock, "--interval", "200ms")
			r.awaitScreen(t, "lock: free", "(q quits)")
			// A key that does not quit does not.
			r.tty.WriteString("x")
			r.quit(t, k.key)
		})
	}
}
