package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gpuexec/gpuexec/internal/etcdurl"
	"github.com/gpuexec/gpuexec/lock"
)

// Exit statuses of status --check (125 when the lock cannot be read).
const (
	checkFree  = 0 // free (with --gpus: a device is free)
	checkHeld  = 1 // held by a live holder (with --gpus: every device is)
	checkStale = 2 // stale (with --gpus: none free, one stale)
)

// checkStatus is status --check's exit status for r: for one lock, free 0,
// held by a live holder 1, stale 2 (a free lock whose GPUs are held beside
// it, beside, is held: its job cannot start); for devices, 0 when any is
// free (a job can start now), else 2 when any is stale (the next job clears
// it and starts), else 1.
func checkStatus(r *lock.Report, beside []*lock.Status) int {
	if len(r.Locks) == 1 && r.Locks[0].Device == "" {
		for _, st := range beside {
			if st.State == lock.StateHeld {
				return checkHeld
			}
		}
	}
	free, stale := false, false
	for _, st := range r.Locks {
		switch st.State {
		case lock.StateFree:
			free = true
		case lock.StateStale:
			stale = true
		}
	}
	switch {
	case free:
		return checkFree
	case stale:
		return checkStale
	}
	return checkHeld
}

// devicesBeside are the device locks that exist beside o.Path (those of
// jobs run with --gpus), as judged, for a status without --gpus: none for
// an etcd lock or with devices. The folder is hostile input: its names
// are only matched (lock.ExistingDevices), the files judged by
// lock.Inspect, and a device whose lock cannot be read is left out.
func devicesBeside(o lock.Options) []*lock.Status {
	if len(o.Devices) > 0 || etcdurl.Is(o.Path) {
		return nil
	}
	names, err := lock.ExistingDevices(o.Path)
	if err != nil || len(names) == 0 {
		return nil
	}
	o.Devices = names
	if r, err := lock.Inspect(o); err == nil {
		return r.Locks
	}
	var out []*lock.Status
	for _, n := range names {
		o.Devices = []string{n}
		if r, err := lock.Inspect(o); err == nil {
			out = append(out, r.Locks...)
		}
	}
	return out
}

// besideNote ends a free lock's (or a cover's) status line when device
// locks beside it are held, which keep its job from starting: " (its GPUs
// are held beside it: gpu0.lock by channels/ep12 (pid 4242); add --gpus
// 0,1 to see them)"; "" when none is.
func besideNote(beside []*lock.Status) string {
	var held, names []string
	for _, st := range beside {
		names = append(names, st.Device)
		if st.State == lock.StateHeld {
			held = append(held, filepath.Base(st.Path)+" by "+st.Holder())
		}
	}
	if len(held) == 0 {
		return ""
	}
	return fmt.Sprintf(" (its GPUs are held beside it: %s; add --gpus %s to see them)",
		strings.Join(held, ", "), strings.Join(names, ","))
}

// describeWithBeside is r's text with the note on device locks beside a
// free lock.
func describeWithBeside(r *lock.Report, beside []*lock.Status) string {
	text := r.Describe()
	if st := r.Locks; len(st) != 1 || st[0].State != lock.StateFree && (st[0].Info == nil || !st[0].Info.Cover) {
		return text
	}
	first, rest, more := strings.Cut(text, "\n")
	first += besideNote(beside)
	if more {
		return first + "\n" + rest
	}
	return first
}

// jsonWithBeside is r's JSON object with "devicesBeside", each device
// lock beside it as status --gpus lists them, when there are any.
func jsonWithBeside(r *lock.Report, beside []*lock.Status) map[string]any {
	m := r.JSON()
	if len(beside) == 0 {
		return m
	}
	list := make([]map[string]any, len(beside))
	for i, st := range beside {
		list[i] = st.JSON()
		list[i]["gpu"] = st.Device
	}
	m["devicesBeside"] = list
	return m
}
