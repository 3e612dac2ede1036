package supervisor

import (
	"fmt"
	"slices"

	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/lock"
)

// describeProcesses describes the n largest users of memory, and how many
// more there are.
func describeProcesses(ps []gpu.Attributed, n int) []string {
	slices.SortStableFunc(ps, func(a, b gpu.Attributed) int { return int(b.Used - a.Used) })
	var out []string
	for i, p := range ps {
		if i == n {
			out = append(out, fmt.Sprintf("%d more", len(ps)-n))
			break
		}
		out = append(out, p.Describe())
	}
	return out
}

// Attribute names the gpuexec job each process runs under, by the holders
// of the locks held of backend b (nil: lock.Files), as Inspect judged them
// (Report.Locks), and by descent from any gpuexec. Only holders on this
// host count, only a held lock's (a stale record's pid may be anyone's by
// now), and none of a lock.Leased backend's lock, which stands for no GPU
// of this machine.
func Attribute(ps []gpu.Process, b lock.Backend, held []*lock.Status) []gpu.Attributed {
	jobs, groups := map[int]gpu.Job{}, map[int]int{}
	if !machineLocal(b) {
		held = nil
	}
	for _, st := range held {
		addSharers(jobs, groups, st.Sharers)
		// A stale record's holder is gone: its pid may be any
		// process's by now. A shared record names one of its sharers,
		// whose sidecars say whose processes are whose (see
		// lock.Sharer.Unattributed).
		if st.State != lock.StateHeld || st.Info == nil || st.Info.Share || !proc.SameHost(st.Info.Host) {
			continue
		}
		jobs[st.Info.PID] = gpu.Job{Owner: st.Info.Owner, Slug: st.Info.Slug, PID: st.Info.PID}
		if st.Info.ChildPGID > 0 {
			groups[st.Info.ChildPGID] = st.Info.PID
		}
	}
	return gpu.Attribute(ps, jobs, groups, ancestry{})
}

// attributeByLock is Attribute by the holders of the lock o (or its
// devices) of backend b as read now (a lock.Leased backend's is not read).
func attributeByLock(ps []gpu.Process, b lock.Backend, o lock.Options) []gpu.Attributed {
	var held []*lock.Status
	if machineLocal(b) {
		if r, err := lock.Inspect(lock.Options{Path: o.Path, Devices: o.Devices}); err == nil {
			held = r.Locks
		}
	}
	return Attribute(ps, b, held)
}

// ancestry reads the process table for gpu.Attribute.
type ancestry struct{}

func (ancestry) Parent(pid int) (int, bool) { return proc.Parent(pid) }
func (ancestry) Group(pid int) (int, bool) {
	st, ok := proc.ReadStat(pid)
	return st.PGRP, ok && st.PGRP > 0
}
func (ancestry) Name(pid int) string {
	st, _ := proc.ReadStat(pid)
	return st.Comm
}
