//go:build linux

package supervisor

import (
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuexec/gpuexec/signals"
)

// terminalSignals are the signals a terminal sends its foreground process
// group that end a job (Ctrl+C, Ctrl+\, a hangup), as far as this process
// catches them: one ignored when it started is ignored by the job too.
func terminalSignals() []os.Signal {
	var out []os.Signal
	for _, s := range signals.Caught() {
		switch s {
		case syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP:
			out = append(out, s)
		}
	}
	return out
}

// runSentinel is RunSentinel on Linux.
func runSentinel() int {
	// Run by hand (not by the gpuexec that is its parent, with pipes of
	// its own), it would sit there and swallow Ctrl+C: it says what it is
	// instead.
	if !startedAsSentinel() {
		os.Stderr.WriteString(SentinelArg + " is what gpuexec starts in a job's process group; it is not run by hand\n")
		return ExitFailed
	}
	// Started as /proc/self/exe, it would be "exe" in ps and top: it says
	// what it is there too.
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&sentinelName[0])), 0, 0, 0)
	// Ctrl+Z stops the job, not its sentinel, which must hear Ctrl+C
	// while a job that does not stop on Ctrl+Z runs on: gpuexec stops it
	// when it stops with the job (see pause), and continues the group
	// with itself.
	signal.Ignore(syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	c := make(chan os.Signal, 16)
	if sigs := terminalSignals(); len(sigs) > 0 {
		signal.Notify(c, sigs...)
	}
	if _, err := os.Stdout.Write([]byte{0}); err != nil {
		return 1
	}
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	for {
		select {
		case sig := <-c:
			if _, err := os.Stdout.Write([]byte{byte(sig.(syscall.Signal))}); err != nil {
				return 1
			}
		case <-eof:
			return 0
		}
	}
}

// sentinelOf names, in the sentinel's environment (which holds nothing
// else), the pid of the gpuexec that started it.
const sentinelOf = "GPUEXEC_SENTINEL_OF"

// startedAsSentinel reports whether this process was started by
// startSentinel: its parent is the gpuexec its environment names, and its
// stdin and stdout are pipes. A user or a script that gives SentinelArg
// (gpuexec --gpuexec-terminal-sentinel | less) has another environment.
func startedAsSentinel() bool {
	if os.Getenv(sentinelOf) != strconv.Itoa(os.Getppid()) {
		return false
	}
	for _, f := range []*os.File{os.Stdin, os.Stdout} {
		if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			return false
		}
	}
	return true
}

// sentinel is a job's terminal sentinel (see RunSentinel), as gpuexec sees
// it: its own child, in the job's process group. It costs one small
// process while the job runs, and only when the job has the terminal.
type sentinel struct {
	proc    *os.Process
	in      *os.File       // the sentinel's stdin: closed, it ends
	watched []os.Signal    // what it reports
	heard   chan os.Signal // what it reported
	ready   chan struct{}  // closed once it listens
	done    chan struct{}  // closed once it was waited for
	once    sync.Once
}

// sentinelName is the sentinel's name in ps and top (at most 15 bytes and
// a NUL, as the kernel keeps it).
var sentinelName = []byte("gpuexec-sentry\x00")

// sentinelWait bounds the wait for a sentinel to end once it was killed.
const sentinelWait = time.Second

// startSentinel starts this program again as the sentinel of the job
// whose process group is pgid. /proc/self/exe is this very program, even
// if its file was replaced or removed since it started. A Ctrl+C in the
// moment before the sentinel joins the group (a millisecond after the job
// started) is the job's alone; one after that but before it listens ends
// it, which tells the same (see read).
func startSentinel(pgid int) (*sentinel, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:   "/proc/self/exe",
		Args:   []string{os.Args[0], SentinelArg},
		Env:    []string{sentinelOf + "=" + strconv.Itoa(os.Getpid())},
		Stdin:  inR,
		Stdout: outW,
		// Pdeathsig as for the job; the closed stdin also ends it.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pgid: pgid, Pdeathsig: syscall.SIGKILL},
	}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	s := &sentinel{proc: cmd.Process, in: inW, watched: terminalSignals(),
		heard: make(chan os.Signal, 8), ready: make(chan struct{}), done: make(chan struct{})}
	go s.read(cmd, outR)
	return s, nil
}

// read takes the sentinel's reports until it ends, and waits for it.
func (s *sentinel) read(cmd *exec.Cmd, out *os.File) {
	defer close(s.done)
	buf := make([]byte, 64)
	for {
		n, err := out.Read(buf)
		for _, b := range buf[:n] {
			if b == 0 {
				s.once.Do(func() { close(s.ready) })
			} else {
				s.report(syscall.Signal(b))
			}
		}
		if err != nil {
			break
		}
	}
	out.Close()
	cmd.Wait()
	// A signal that came before it listened ended it. Reaped by drain's
	// reap of every child (once stop gave up waiting), it left no state.
	if cmd.ProcessState == nil {
		return
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		s.report(ws.Signal())
	}
}

// report passes sig on if the sentinel watches it; a burst beyond the
// buffer is dropped (one is all that counts).
func (s *sentinel) report(sig syscall.Signal) {
	if !slices.Contains(s.watched, os.Signal(sig)) {
		return
	}
	select {
	case s.heard <- sig:
	default:
	}
}

// pause stops the sentinel (SIGSTOP) while the job is stopped and gpuexec
// stops with it: otherwise the sentinel, which ignores the terminal's
// Ctrl+Z, would be the one process of the job's group that runs, and the
// group would look running (status). The group's SIGCONT continues it.
func (s *sentinel) pause() { s.proc.Signal(syscall.SIGSTOP) }

// stop ends the sentinel and waits for it (bounded by sentinelWait), so
// that it no longer counts in the job's group.
func (s *sentinel) stop() {
	s.proc.Kill()
	s.in.Close()
	select {
	case <-s.done:
	case <-time.After(sentinelWait):
	}
}
