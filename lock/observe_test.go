package lock

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuexec/gpuexec/internal/proc"
)

// fakeLooker is a fakeProber that also says whether processes and groups
// run, and what liveness files note.
type fakeLooker struct {
	fakeProber
	runs      map[int]proc.Run
	groupRuns map[int]proc.Run
	notes     map[string]jobGroup // token -> group noted, held or not
}

func (f fakeLooker) run(pid int) proc.Run           { return f.runs[pid] }
func (f fakeLooker) groupRun(g jobGroup) proc.Run   { return f.groupRuns[g.id] }
func (f fakeLooker) liveNote(token string) jobGroup { return f.notes[token] }
func (f fakeLooker) groupUID(int) (int, bool)       { return 0, false }

// observe tells a held lock's holder and job as the OS sees them, and
// claims nothing it cannot tell from another process with the same pid.
func TestObserve(t *testing.T) {
	const token = "0123456789abcdef"
	rec := func(mod func(*Info)) *Info {
		i := &Info{PID: 100, PIDStart: 5_000, Token: token, Owner: "o", Slug: "s", ChildPGID: 200, ChildStart: 6_000}
		if mod != nil {
			mod(i)
		}
		return i
	}
	running := fakeProber{alivePIDs: map[int]bool{100: true}, starts: map[int]int64{100: 5_000}}
	for _, c := range []struct {
		name   string
		info   *Info
		state  State
		p      fakeLooker
		holder ProcState
		group  int
		job    ProcState
	}{
		{"holder and job run", rec(nil), StateHeld,
			fakeLooker{fakeProber: running, runs: map[int]proc.Run{100: proc.Running}, groupRuns: map[int]proc.Run{200: proc.Running}},
			ProcRunning, 200, ProcRunning},
		{"holder and job stopped (Ctrl+Z)", rec(nil), StateHeld,
			fakeLooker{fakeProber: running, runs: map[int]proc.Run{100: proc.Stopped}, groupRuns: map[int]proc.Run{200: proc.Stopped}},
			ProcStopped, 200, ProcStopped},
		{"holder killed, its job runs", rec(nil), StateHeld,
			fakeLooker{groupRuns: map[int]proc.Run{200: proc.Running}},
			ProcGone, 200, ProcRunning},
		{"holder's pid now another process's", rec(nil), StateHeld,
			fakeLooker{fakeProber: fakeProber{alivePIDs: map[int]bool{100: true}, starts: map[int]int64{100: 900_000}},
				runs: map[int]proc.Run{100: proc.Stopped}, groupRuns: map[int]proc.Run{200: proc.Running}},
			ProcGone, 200, ProcRunning},
		{"a record without the holder's start: its live pid is not told", rec(func(i *Info) { i.PIDStart = 0 }), StateHeld,
			fakeLooker{fakeProber: running, runs: map[int]proc.Run{100: proc.Stopped}, groupRuns: map[int]proc.Run{200: proc.Running}},
			"", 200, ProcRunning},
		{"a start time that cannot be read", rec(nil), StateHeld,
			fakeLooker{fakeProber: fakeProber{alivePIDs: map[int]bool{100: true}}, runs: map[int]proc.Run{100: proc.Stopped}},
			"", 200, ProcUnknown},
		{"the state is not told (off Linux)", rec(nil), StateHeld,
			fakeLooker{fakeProber: running, runs: map[int]proc.Run{100: proc.RunUnknown}, groupRuns: map[int]proc.Run{200: proc.RunUnknown}},
			ProcUnknown, 200, ProcUnknown},
		{"job group noted in the liveness file only", rec(func(i *Info) { i.ChildPGID, i.ChildStart = 0, 0 }), StateHeld,
			fakeLooker{groupRuns: map[int]proc.Run{300: proc.Running}, notes: map[string]jobGroup{token: {id: 300, since: 7_000}}},
			ProcGone, 300, ProcRunning},
		{"a group without its leader's start is not named", rec(func(i *Info) { i.ChildStart = 0 }), StateHeld,
			fakeLooker{groupRuns: map[int]proc.Run{200: proc.Running}},
			ProcGone, 0, ""},
		{"another host's holder", rec(func(i *Info) { i.Host = "render-box-2" }), StateHeld,
			fakeLooker{groupRuns: map[int]proc.Run{200: proc.Running}}, "", 0, ""},
		{"a shared record names one of several", rec(func(i *Info) { i.Share = true }), StateHeld,
			fakeLooker{groupRuns: map[int]proc.Run{200: proc.Running}}, "", 0, ""},
		{"a cover names one of several", rec(func(i *Info) { i.Cover = true }), StateHeld,
			fakeLooker{groupRuns: map[int]proc.Run{200: proc.Running}}, "", 0, ""},
		{"a stale lock", rec(nil), StateStale, fakeLooker{}, "", 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &Status{State: c.state, Info: c.info}
			observe(s, c.p)
			if s.HolderProcess != c.holder || s.JobGroup != c.group || s.JobProcess != c.job {
				t.Errorf("holder %q, job group %d %q; want %q, %d %q", s.HolderProcess, s.JobGroup, s.JobProcess, c.holder, c.group, c.job)
			}
		})
	}
}

// A lock whose folder does not exist is not free: Inspect says so, with
// or without devices, and creates nothing; a folder without a lock in it
// is free.
func TestInspectMissingFolder(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "such", "gpu.lock")
	for _, devices := range [][]string{nil, {"0", "1"}} {
		_, err := Inspect(Options{Path: missing, Devices: devices})
		var pe *fs.PathError
		if !errors.Is(err, ErrNoFolder) || !errors.As(err, &pe) || pe.Path != filepath.Dir(missing) {
			t.Errorf("devices %v: Inspect of a lock in a missing folder: %v, want ErrNoFolder naming %s", devices, err, filepath.Dir(missing))
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "no")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Inspect made the folder: %v", err)
	}
	r, err := Inspect(Options{Path: filepath.Join(dir, "gpu.lock")})
	if err != nil || r.Locks[0].State != StateFree {
		t.Fatalf("an empty folder: %v, %+v", err, r)
	}
}
