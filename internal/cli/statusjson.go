package cli

import (
	"math"

	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/lock"
)

// The object `gpuexec status --json` prints, built once from what status
// read.

// isoMillis is how --json writes a lock file's mtime.
const isoMillis = "2006-01-02T15:04:05.000Z"

// statusObject is status --json's object: for one lock, the lock's object
// (see lockObject) with "queue", the live waiters in order, and
// "devicesBeside", each device lock beside it (r.Beside) as with devices,
// when there are any; with devices, {"path", "devices": [each device's
// object with "gpu", its name], "queue"}. rooms[i] is what is left to
// share on the card of r.Locks[i] ("budgetFreeMiB" in its object), where
// known (see shareRooms). Then "gpus", the cards (when nvidia-smi was
// found), and "gpusError", why they or their processes could not be read.
func statusObject(r *lock.Report, rooms map[int]int64, cards []gpu.Card, gerr error) map[string]any {
	queue := make([]lock.Waiter, 0, len(r.Queue))
	for _, w := range r.Queue {
		if w.Alive {
			queue = append(queue, w)
		}
	}
	room := func(i int, m map[string]any) map[string]any {
		if mib, ok := rooms[i]; ok {
			m["budgetFreeMiB"] = mib
		}
		return m
	}
	var m map[string]any
	if len(r.Locks) == 1 && r.Locks[0].Device == "" {
		m = lockObject(r.Locks[0])
		m["queue"] = queue
		if len(r.Beside) > 0 {
			m["devicesBeside"] = deviceObjects(r.Beside)
		}
		room(0, m)
	} else {
		devices := deviceObjects(r.Locks)
		for i := range devices {
			room(i, devices[i])
		}
		m = map[string]any{"path": r.Path, "devices": devices, "queue": queue}
	}
	if gerr != nil {
		m["gpusError"] = gerr.Error()
	}
	if cards != nil {
		m["gpus"] = cards
	}
	return m
}

// deviceObjects are the objects of device locks: each one's (see
// lockObject) with "gpu", its device's name.
func deviceObjects(locks []*lock.Status) []map[string]any {
	list := make([]map[string]any, len(locks))
	for i, st := range locks {
		list[i] = lockObject(st)
		list[i]["gpu"] = st.Device
	}
	return list
}

// lockObject is a lock's object: the record's fields as read (unknown ones
// included), then state, path, heartbeatAgeSeconds, alive and staleReason
// (or note, why a held lock is held), and, where they were told,
// holderProcess, jobGroup, jobProcess and jobGroupDoubt (see doubtText),
// which win over record fields of the same name; for a lock kept held by
// a job whose record is gone, liveFile and childPgid; for a record that
// cannot be read, its content; for a shared lock, its sharers and
// budgetUsedMiB (null when a budget is unknown).
func lockObject(st *lock.Status) map[string]any {
	m := make(map[string]any, len(st.Fields)+6)
	for k, v := range st.Fields {
		m[k] = v
	}
	m["state"] = string(st.State)
	m["path"] = st.Path
	m["alive"] = st.Alive
	if st.State == lock.StateFree {
		return m
	}
	m["heartbeatAgeSeconds"] = math.Round(st.HeartbeatAge.Seconds()*1000) / 1000
	m["modTime"] = st.ModTime.UTC().Format(isoMillis)
	if st.State == lock.StateStale {
		m["staleReason"] = st.Reason
	} else {
		m["staleReason"] = nil
		if st.Reason != "" {
			m["note"] = st.Reason
		}
	}
	if st.HolderProcess != "" {
		m["holderProcess"] = st.HolderProcess
	}
	if st.JobGroup > 0 {
		m["jobGroup"] = st.JobGroup
		m["jobProcess"] = st.JobProcess
		if st.JobGroupDoubt != nil {
			m["jobGroupDoubt"] = doubtText(st)
		}
	}
	if st.Orphan != "" {
		m["heartbeatAgeSeconds"] = nil
		m["liveFile"] = st.Orphan
		if st.OrphanGroup > 0 {
			m["childPgid"] = st.OrphanGroup
		}
		return m
	}
	if st.Info == nil {
		m["content"] = string(st.Content)
	}
	if st.Info != nil && st.Info.Share {
		sharers := st.Sharers
		if sharers == nil {
			sharers = []lock.Sharer{}
		}
		m["sharers"] = sharers
		if used, known := lock.Budget(st.Sharers); known {
			m["budgetUsedMiB"] = used
		} else {
			m["budgetUsedMiB"] = nil
		}
	}
	return m
}
