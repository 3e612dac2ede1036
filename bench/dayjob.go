//go:build linux

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The fake card of (i): an RTX 4090 as a recent Linux driver lists it.
// 342 MiB reserved is the figure of internal/gpu/gputest's RTX4090 and of
// docs/gpu.md's status example (a 4090 with a recent driver).
const (
	fakeTotalMiB    = 24564
	fakeReservedMiB = 342
	fakeUsableMiB   = fakeTotalMiB - fakeReservedMiB
	// fakeReserveMiB is gpuexec's default --reserve on this card (the
	// supervisor's reserveOf: 5% of the total, at least 512 MiB), and
	// fakeSharableMiB what its sharers' budgets may sum to.
	fakeReserveMiB  = max(fakeTotalMiB*5/100, 512)
	fakeSharableMiB = fakeUsableMiB - fakeReserveMiB
	fakeUUID        = "GPU-2b7c4d1e-93a0-4f6b-8c2d-5e1f0a9b3c47"
	fakeName        = "NVIDIA GeForce RTX 4090"
	fakeMIG         = "Disabled"
	// fakeSMIName is the link to this program that plays nvidia-smi.
	fakeSMIName = "nvidia-smi"
	// registryName is the folder beside the link where the jobs
	// register the memory they use, a file per pid.
	registryName = "registry"
)

// Environment of the gpujob role.
const (
	dayMiBEnv = "BENCH_DAY_MIB" // the job's peak, MiB
	dayDurEnv = "BENCH_DAY_DUR" // how long it runs, a Go duration
	dayRegEnv = "BENCH_DAY_REG" // the registry folder
	dayOutEnv = "BENCH_DAY_OUT" // where it notes its start and end
)

// isFakeSMI reports whether this program was started as the fake
// nvidia-smi (through a link of that name).
func isFakeSMI() bool { return filepath.Base(os.Args[0]) == fakeSMIName }

// fakeSMI answers as nvidia-smi would for one card whose used memory is
// what the live jobs of the registry beside os.Args[0] use.
func fakeSMI(args []string) int {
	out, code := fakeSMIAnswer(filepath.Join(filepath.Dir(os.Args[0]), registryName), args)
	os.Stdout.WriteString(out)
	return code
}

// fakeSMIAnswer is what nvidia-smi prints for args, and its exit status:
// the fields asked, in the order asked, ", " between them, no units, as a
// real driver prints them; a field it does not know fails the query as a
// driver does.
func fakeSMIAnswer(registry string, args []string) (string, int) {
	var kind, fields, format string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--query-gpu="):
			kind, fields = "gpu", strings.TrimPrefix(a, "--query-gpu=")
		case strings.HasPrefix(a, "--query-compute-apps="):
			kind, fields = "apps", strings.TrimPrefix(a, "--query-compute-apps=")
		case strings.HasPrefix(a, "--format="):
			format = strings.TrimPrefix(a, "--format=")
		}
	}
	if kind == "" || format != "csv,noheader,nounits" {
		return "bench's fake nvidia-smi answers only --query-gpu=... or --query-compute-apps=... with --format=csv,noheader,nounits\n", 2
	}
	entries, err := readRegistry(registry)
	if err != nil {
		return "bench's fake nvidia-smi: " + err.Error() + "\n", 2
	}
	var used int64
	for _, e := range entries {
		used += e.mib
	}
	names := strings.Split(fields, ",")
	pick := func(vals map[string]string) (string, string) {
		row := make([]string, len(names))
		for i, n := range names {
			v, ok := vals[n]
			if !ok {
				return "", n
			}
			row[i] = v
		}
		return strings.Join(row, ", ") + "\n", ""
	}
	var s strings.Builder
	if kind == "gpu" {
		row, bad := pick(map[string]string{
			"index": "0", "uuid": fakeUUID, "name": fakeName,
			"memory.total": strconv.Itoa(fakeTotalMiB), "memory.used": strconv.FormatInt(used, 10),
			"memory.free":     strconv.FormatInt(max(fakeUsableMiB-used, 0), 10),
			"memory.reserved": strconv.Itoa(fakeReservedMiB), "mig.mode.current": fakeMIG,
			"count": "1",
		})
		if bad != "" {
			return fmt.Sprintf("Field \"%s\" is not a valid field to query.\n\n", bad), 2
		}
		s.WriteString(row)
	} else {
		for _, e := range entries {
			if e.mib <= 0 {
				continue // no context on the card yet
			}
			row, bad := pick(map[string]string{"gpu_uuid": fakeUUID, "pid": strconv.Itoa(e.pid), "used_memory": strconv.FormatInt(e.mib, 10)})
			if bad != "" {
				return fmt.Sprintf("Field \"%s\" is not a valid field to query.\n\n", bad), 2
			}
			s.WriteString(row)
		}
	}
	return s.String(), 0
}

// regEntry is a live job's registration: its pid and the MiB it uses now.
type regEntry struct {
	pid int
	mib int64
}

// readRegistry lists the registrations of live processes in dir, by pid.
// A file is "MIB STARTTIME", STARTTIME the process's start in clock ticks
// (/proc/PID/stat field 22): an entry whose pid is gone, a zombie, or now
// another process (another start time) is left out.
func readRegistry(dir string) ([]regEntry, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []regEntry
	for _, de := range des {
		pid, err := strconv.Atoi(de.Name())
		if err != nil {
			continue // a temporary file being written
		}
		data, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // unregistered meanwhile
		}
		if err != nil {
			return nil, err
		}
		f := strings.Fields(string(data))
		if len(f) != 2 {
			return nil, fmt.Errorf("registry entry %s: %q", de.Name(), data)
		}
		mib, err1 := strconv.ParseInt(f[0], 10, 64)
		st, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("registry entry %s: %q", de.Name(), data)
		}
		if start, ok := liveStart(pid); !ok || start != st {
			continue
		}
		out = append(out, regEntry{pid: pid, mib: mib})
	}
	slices.SortFunc(out, func(x, y regEntry) int { return x.pid - y.pid })
	return out, nil
}

// liveStart is pid's start time in clock ticks since boot; ok false when
// the process is gone or a zombie.
func liveStart(pid int) (uint64, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3, the state
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	st, err := strconv.ParseUint(f[19], 10, 64) // field 22
	return st, err == nil
}

// gpujob is one job of (i): it notes its start, registers the memory it
// uses under its pid, growing linearly from 0 to its peak over the first
// tenth of its run (as frameworks allocate), holds the peak to the end of
// its run, notes its end, unregisters and exits 0. Registrations are
// written atomically (a temporary file renamed).
func gpujob() int {
	start := time.Now()
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "bench gpujob: %v\n", err)
		return 2
	}
	peak, err := strconv.ParseInt(os.Getenv(dayMiBEnv), 10, 64)
	if err != nil {
		return fail(err)
	}
	dur, err := time.ParseDuration(os.Getenv(dayDurEnv))
	if err != nil {
		return fail(err)
	}
	reg, outPath := os.Getenv(dayRegEnv), os.Getenv(dayOutEnv)
	out, err := os.OpenFile(outPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fail(err)
	}
	defer out.Close()
	if _, err := fmt.Fprintf(out, "start %d %d\n", start.UnixNano(), os.Getpid()); err != nil {
		return fail(err)
	}
	pid := os.Getpid()
	st, ok := liveStart(pid)
	if !ok {
		return fail(errors.New("cannot read /proc/self/stat"))
	}
	entry := filepath.Join(reg, strconv.Itoa(pid))
	register := func(mib int64) error {
		tmp := entry + ".tmp"
		if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d\n", mib, st), 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, entry)
	}
	ramp := dur / 10
	step := max(ramp/10, 2*time.Millisecond)
	for {
		el := time.Since(start)
		mib := peak
		if el < ramp {
			mib = int64(float64(peak) * float64(el) / float64(ramp))
		}
		if err := register(mib); err != nil {
			return fail(err)
		}
		if mib == peak {
			break
		}
		time.Sleep(min(step, ramp-el))
	}
	time.Sleep(time.Until(start.Add(dur)))
	end := time.Now()
	if _, err := fmt.Fprintf(out, "end %d\n", end.UnixNano()); err != nil {
		return fail(err)
	}
	if err := os.Remove(entry); err != nil {
		return fail(err)
	}
	return 0
}
