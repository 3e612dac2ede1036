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
	"path/filepath"
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
	watch      = flag.String("marker-watch", "", "check, on entry, through the hold and on exit, that this file (a marker of sections that use every card) does not exist")
	cards      = flag.Int("cards", 0, "the machine has this many GPUs: flock -truth-N for each card the job uses (CUDA_VISIBLE_DEVICES, else every one) instead of -truth")
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

// heldLocks are the lock files the job's gpuexec holds: GPUEXEC_LOCK_PATH,
// or with devices (GPUEXEC_GPU), each device's beside it (gpu.lock:
// gpu0.lock).
func heldLocks() []string {
	path := os.Getenv("GPUEXEC_LOCK_PATH")
	devs := os.Getenv("GPUEXEC_GPU")
	if devs == "" {
		return []string{path}
	}
	ext := filepath.Ext(path)
	var out []string
	for _, d := range strings.Split(devs, ",") {
		out = append(out, strings.TrimSuffix(path, ext)+d+ext)
	}
	return out
}

// recordsName reports the first lock file held whose record does not name
// pid ("" when every one does), and the pid it names.
func recordsName(pid int) (string, int) {
	for _, p := range heldLocks() {
		if got := recordPID(p); got != pid {
			return p, got
		}
	}
	return "", pid
}

// truthFiles are the truth files the job flocks: -truth, or with -cards one
// per card it uses.
func truthFiles() []string {
	if *cards == 0 {
		return []string{*truth}
	}
	var used []string
	if v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok {
		used = strings.Split(v, ",")
	} else {
		for i := range *cards {
			used = append(used, strconv.Itoa(i))
		}
	}
	out := make([]string, len(used))
	for i, c := range used {
		out[i] = *truth + "-" + c
	}
	return out
}

// recordPID is the pid in the lock record at path, 0 if it cannot be read.
func recordPID(path string) int {
	b, err := os.ReadFile(path)
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
	var held []*os.File
	for _, path := range truthFiles() {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "torture-job:", err)
			return 2
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			if errors.Is(err, syscall.EWOULDBLOCK) {
				report("OVERLAP: the truth file %s is flocked by another section (CUDA_VISIBLE_DEVICES=%q)", path, os.Getenv("CUDA_VISIBLE_DEVICES"))
				return 3
			}
			fmt.Fprintln(os.Stderr, "torture-job: flock:", err)
			return 2
		}
		held = append(held, f)
	}
	// From here on, until this process and every process it passed the
	// files to are gone, no other section can take the flocks.
	if path, pid := recordsName(parent); path != "" {
		report("the lock record %s names pid %d, not this job's gpuexec (pid %d)", path, pid, parent)
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
		if err := startGrandchild(held, i); err != nil {
			fmt.Fprintln(os.Stderr, "torture-job: grandchild:", err)
			return 2
		}
	}
	if dieAfter >= 0 {
		time.Sleep(dieAfter - time.Since(began))
		killSelf()
	}
	if *watch == "" {
		time.Sleep(*hold - time.Since(began))
	}
	for *watch != "" {
		if other, err := os.ReadFile(*watch); err == nil {
			report("OVERLAP: %s exists while this section runs: inside is %q", *watch, other)
			return 3
		}
		left := *hold - time.Since(began)
		if left <= 0 {
			break
		}
		time.Sleep(min(left, 500*time.Microsecond))
	}
	if path, pid := recordsName(parent); path != "" {
		report("at the end of the section the lock record %s names pid %d, not this job's gpuexec (pid %d)", path, pid, parent)
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
// flocked truth files (as its fds 4, 5, ...) and, with -gc-keep-live,
// gpuexec's liveness file (fd 3); without it, fd 3 is /dev/null, and no
// other file gpuexec passed on is open in it.
func startGrandchild(truthFiles []*os.File, n int) error {
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
	cmd.ExtraFiles = append([]*os.File{fd3}, truthFiles...)
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
