//go:build linux

// Command torture-job is the job that the torture tests run under gpuexec:
// one critical section that proves it runs alone, with something the kernel
// releases when it dies, so that no SIGKILL can hide an overlap.
//
// On entry it takes a non-blocking exclusive flock on -truth. The kernel
// refuses it while any other section (or a process such a section left
// behind) still holds it, and drops it the instant its holders die: failing
// to take it means two sections are on the GPU at once, and the job appends
// a line to -overlap and exits 3. Optionally it also creates -marker with
// O_CREAT|O_EXCL, the overlap check of the seed's Node tool (seedlock.cjs
// run mode), so that sections of the two tools detect each other.
//
// It reports on stdout (gpuexec's, inherited): "start ID PID" first, "gc ID
// PID" for each grandchild it starts, "done ID" at the end; -done gets
// "done ID" appended (one write) when the section is complete.
//
// Grandchildren (-gc N) share the flocked truth file, so that they count as
// "on the GPU" for as long as they run; -gc-keep-live keeps gpuexec's
// liveness file (fd 3) open in them too. They exit when -gc-release exists
// or after -gc-life.
package main

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var (
	id         = flag.Int("id", 0, "section id")
	hold       = flag.Duration("hold", 2*time.Millisecond, "time inside the section")
	truth      = flag.String("truth", "", "file to flock (non-blocking, exclusive)")
	overlap    = flag.String("overlap", "", "file to append overlap reports to")
	done       = flag.String("done", "", "file to append \"done ID\" to")
	marker     = flag.String("marker", "", "also create this file O_EXCL on entry, remove it on exit")
	die        = flag.String("die", "", "SIGKILL itself: before-flock, after-flock, or a duration into the hold")
	gc         = flag.Int("gc", 0, "grandchildren to start inside the section")
	gcLife     = flag.Duration("gc-life", 50*time.Millisecond, "longest life of a grandchild")
	gcRelease  = flag.String("gc-release", "", "grandchildren exit once this file exists")
	gcKeepLive = flag.Bool("gc-keep-live", false, "grandchildren keep gpuexec's liveness file (fd 3)")
	ignoreInt  = flag.Bool("ignore-int", false, "ignore SIGINT and SIGTERM (finish the section anyway)")
	grandchild = flag.Bool("grandchild", false, "internal: run as a grandchild")
)

func main() {
	flag.Parse()
	if *grandchild {
		os.Exit(runGrandchild())
	}
	os.Exit(run())
}

func say(format string, a ...any) {
	fmt.Fprintf(os.Stdout, format+"\n", a...)
}

// report appends line to -overlap in one write: the record that survives
// whatever happens to this process next.
func report(format string, a ...any) {
	line := fmt.Sprintf("section %d (pid %d): ", *id, os.Getpid()) + fmt.Sprintf(format, a...) + "\n"
	if f, err := os.OpenFile(*overlap, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
		f.WriteString(line)
		f.Close()
	}
	fmt.Fprint(os.Stderr, "torture-job: "+line)
}

func killSelf() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// recordPID is the pid in the lock record, 0 if it cannot be read.
func recordPID() int {
	b, err := os.ReadFile(os.Getenv("GPUEXEC_LOCK_PATH"))
	if err != nil {
		return 0
	}
	// A tiny parser: the record is gpuexec's JSON; "pid" is an integer.
	s := string(b)
	i := strings.Index(s, `"pid":`)
	if i < 0 {
		return 0
	}
	s = s[i+len(`"pid":`):]
	j := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	n, _ := strconv.Atoi(s[:j])
	return n
}

func run() int {
	parent := os.Getppid()
	if *ignoreInt {
		// Before "start": a test that sees "start" knows the signals
		// are ignored from then on.
		signal.Ignore(syscall.SIGINT, syscall.SIGTERM)
	}
	say("start %d %d", *id, os.Getpid())
	if os.Getenv("GPUEXEC_LOCK_HELD") != "1" {
		report("GPUEXEC_LOCK_HELD is %q, not 1", os.Getenv("GPUEXEC_LOCK_HELD"))
		return 3
	}
	if *die == "before-flock" {
		killSelf()
	}
	f, err := os.OpenFile(*truth, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "torture-job:", err)
		return 2
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			report("OVERLAP: the truth file is flocked by another section")
			return 3
		}
		fmt.Fprintln(os.Stderr, "torture-job: flock:", err)
		return 2
	}
	// From here on, until this process and every process it passed f to
	// are gone, no other section can take the flock.
	if pid := recordPID(); pid != parent {
		report("the lock record names pid %d, not this job's gpuexec (pid %d)", pid, parent)
		return 3
	}
	me := fmt.Sprintf("go %d %d", *id, os.Getpid())
	if *marker != "" {
		m, err := os.OpenFile(*marker, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			other, _ := os.ReadFile(*marker)
			report("OVERLAP: creating the marker: %v: inside is %q", err, other)
			return 3
		}
		m.WriteString(me)
		m.Close()
	}
	if *die == "after-flock" {
		killSelf()
	}
	var dieAfter time.Duration = -1
	if d, err := time.ParseDuration(*die); err == nil {
		dieAfter = d
	}
	began := time.Now()
	for i := range *gc {
		if err := startGrandchild(f, i); err != nil {
			fmt.Fprintln(os.Stderr, "torture-job: grandchild:", err)
			return 2
		}
	}
	if dieAfter >= 0 {
		time.Sleep(dieAfter - time.Since(began))
		killSelf()
	}
	time.Sleep(*hold - time.Since(began))
	if pid := recordPID(); pid != parent {
		report("at the end of the section the lock record names pid %d, not this job's gpuexec (pid %d)", pid, parent)
		return 3
	}
	if *marker != "" {
		if got, _ := os.ReadFile(*marker); string(got) != me {
			report("OVERLAP: leaving: the marker holds %q, not %q", got, me)
			return 3
		}
		if err := os.Remove(*marker); err != nil {
			fmt.Fprintln(os.Stderr, "torture-job:", err)
			return 2
		}
	}
	if *done != "" {
		d, err := os.OpenFile(*done, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "torture-job:", err)
			return 2
		}
		_, werr := fmt.Fprintf(d, "done %d\n", *id)
		if err := errors.Join(werr, d.Close()); err != nil {
			fmt.Fprintln(os.Stderr, "torture-job:", err)
			return 2
		}
	}
	say("done %d", *id)
	return 0
}

// startGrandchild starts this program as a grandchild that shares the
// flocked truth file (as its fd 4) and, with -gc-keep-live, gpuexec's
// liveness file (fd 3); without it, fd 3 is /dev/null.
func startGrandchild(truthFile *os.File, n int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var fd3 *os.File
	if *gcKeepLive {
		fd3 = os.NewFile(3, "gpuexec-live")
	} else {
		if fd3, err = os.Open(os.DevNull); err != nil {
			return err
		}
		defer fd3.Close()
	}
	// Jitter the grandchildren's lives, so that they end at random points
	// of the hand-over too.
	life := *gcLife/2 + time.Duration(rand.Int64N(int64(*gcLife/2)+1))
	cmd := exec.Command(self, "-grandchild", "-id", strconv.Itoa(*id), "-gc-life", life.String(), "-gc-release", *gcRelease,
		fmt.Sprintf("-ignore-int=%v", *ignoreInt))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{fd3, truthFile}
	if err := cmd.Start(); err != nil {
		return err
	}
	say("gc %d %d", *id, cmd.Process.Pid)
	// Not waited for: it is meant to outlive this process.
	cmd.Process.Release()
	return nil
}

func runGrandchild() int {
	if *ignoreInt {
		signal.Ignore(syscall.SIGINT, syscall.SIGTERM)
	}
	deadline := time.Now().Add(*gcLife)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if *gcRelease != "" {
			if _, err := os.Stat(*gcRelease); err == nil {
				return 0
			}
		}
		<-tick.C
	}
	return 0
}
