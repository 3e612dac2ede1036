package lock

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/gpuexec/gpuexec/internal/escape"
)

// The text and JSON forms of what Inspect and Clear return: what `gpuexec
// status` and `gpuexec clear` print, for every backend.

// Describe is what `gpuexec status` prints: the lock's line (see
// Status.Describe), or one line per device ("GPU 0: free"), then one line
// per live waiter: "  1. reels/tts (pid 77) waiting since 20:21:05", under
// a "queue:" line with devices.
func (r *Report) Describe() string {
	var b strings.Builder
	if !r.devices && len(r.Locks) == 1 {
		b.WriteString(r.Locks[0].Describe())
		writeQueue(&b, r.Queue)
		return b.String()
	}
	for i, st := range r.Locks {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("GPU " + st.Device + ": " + st.Describe())
	}
	var q strings.Builder
	writeQueue(&q, r.Queue)
	if q.Len() > 0 {
		b.WriteString("\nqueue:" + q.String())
	}
	return b.String()
}

// JSON is the object `gpuexec status --json` prints: for one lock, the
// lock's object (see Status.JSON) with "queue", the live waiters in order;
// with devices, {"path", "devices": [each device's object with "gpu", its
// name], "queue"}.
func (r *Report) JSON() map[string]any {
	queue := make([]Waiter, 0, len(r.Queue))
	for _, w := range r.Queue {
		if w.Alive {
			queue = append(queue, w)
		}
	}
	if !r.devices && len(r.Locks) == 1 {
		m := r.Locks[0].JSON()
		m["queue"] = queue
		return m
	}
	list := make([]map[string]any, len(r.Locks))
	for i, st := range r.Locks {
		m := st.JSON()
		m["gpu"] = st.Device
		list[i] = m
	}
	return map[string]any{"path": r.Path, "devices": list, "queue": queue}
}

// writeQueue writes a line per live waiter.
func writeQueue(b *strings.Builder, queue []Waiter) {
	for _, w := range queue {
		if !w.Alive {
			continue
		}
		fmt.Fprintf(b, "\n  %d. %s/%s (pid %d", w.Position, escape.Text(w.Owner), escape.Text(w.Slug), w.PID)
		if !sameHost(w.Host) {
			b.WriteString(" on " + escape.Text(w.Host))
		}
		b.WriteString(") waiting")
		if t, err := time.Parse(time.RFC3339Nano, w.Since); err == nil {
			b.WriteString(" since " + t.Local().Format("15:04:05"))
		}
	}
}

// Describe is the one human line for a lock: "free", or the holder, since
// when, the heartbeat's age, and alive or stale and why.
func (s *Status) Describe() string {
	if s.State == StateFree {
		return "free"
	}
	if s.orphan != "" {
		return "held by " + s.Holder() + ", alive (" + s.Reason + ")"
	}
	var b strings.Builder
	b.WriteString(s.Heading())
	switch {
	case s.State == StateStale:
		b.WriteString("; " + s.Reason)
	case s.Reason != "":
		b.WriteString(", alive (" + s.Reason + ")")
	default:
		b.WriteString(", alive")
	}
	writeSharers(&b, s)
	return b.String()
}

// Heading is the start of Describe's line for a lock that is not free:
// who holds it, since when, and the heartbeat's age ("held by
// channels/ep12 (pid 4242) since 2026-10-12 20:18:03, heartbeat 5s ago";
// "stale: " before it for a stale lock).
func (s *Status) Heading() string {
	var b strings.Builder
	if s.State == StateStale {
		b.WriteString("stale: ")
	}
	if s.Info != nil && s.Info.Cover {
		b.WriteString("held for the GPU locks beside it, named by " + s.Holder())
	} else {
		b.WriteString("held by " + s.Holder())
	}
	if s.Info != nil {
		if t := s.Info.Acquired(); !t.IsZero() {
			b.WriteString(" since " + fmtStamp(t))
		}
	}
	fmt.Fprintf(&b, ", heartbeat %s ago", fmtAge(s.HeartbeatAge))
	return b.String()
}

// writeSharers adds, for a lock held in shared mode, the budgets line and
// a line per sharer: "  shared: 20.0 GiB of budgets by 2 jobs" then
// "    channels/ep12 (pid 4242): budget 10.0 GiB, using 11.2 GiB: OVER BUDGET",
// and for a sharer whose processes are not attributed to it (see vouch)
// "; its processes not attributed: " and why.
func writeSharers(b *strings.Builder, s *Status) {
	if s.Info == nil || !s.Info.Share || s.State != StateHeld {
		return
	}
	used, known := Budget(s.Sharers)
	if !known {
		used = -1
	}
	fmt.Fprintf(b, "\n  shared: %s of budgets by %d job(s)", fmtMiB(used), len(s.Sharers))
	for _, sh := range s.Sharers {
		if sh.unopened {
			b.WriteString("\n    a sharer whose sidecar this user may not read: budget unknown")
			continue
		}
		fmt.Fprintf(b, "\n    %s: budget %s", sharerName(sh), fmtMiB(sh.MiB))
		if sh.UsedMiB > 0 {
			fmt.Fprintf(b, ", using %s", fmtMiB(sh.UsedMiB))
		}
		if sh.Over {
			b.WriteString(": OVER BUDGET")
		}
		if sh.Unattributed != "" {
			b.WriteString("; its processes not attributed: " + sh.Unattributed)
		}
	}
}

// JSON is a lock's object in `gpuexec status --json`: the record's fields
// as read (unknown ones included), then state, path, heartbeatAgeSeconds,
// alive and staleReason, and, where they were told, holderProcess,
// jobGroup, jobProcess and jobGroupDoubt (see Status), which win over
// record fields of the same name.
func (s *Status) JSON() map[string]any {
	m := make(map[string]any, len(s.Fields)+6)
	for k, v := range s.Fields {
		m[k] = v
	}
	m["state"] = string(s.State)
	m["path"] = s.Path
	m["alive"] = s.Alive
	if s.State == StateFree {
		return m
	}
	m["heartbeatAgeSeconds"] = math.Round(s.HeartbeatAge.Seconds()*1000) / 1000
	m["modTime"] = s.ModTime.UTC().Format(isoMillis)
	if s.State == StateStale {
		m["staleReason"] = s.Reason
	} else {
		m["staleReason"] = nil
		if s.Reason != "" {
			m["note"] = s.Reason
		}
	}
	if s.HolderProcess != "" {
		m["holderProcess"] = s.HolderProcess
	}
	if s.JobGroup > 0 {
		m["jobGroup"] = s.JobGroup
		m["jobProcess"] = s.JobProcess
		if s.JobGroupDoubt != "" {
			m["jobGroupDoubt"] = s.JobGroupDoubt
		}
	}
	if s.orphan != "" {
		m["heartbeatAgeSeconds"] = nil
		m["liveFile"] = s.orphan
		if s.orphanGroup > 0 {
			m["childPgid"] = s.orphanGroup
		}
		return m
	}
	if s.Info == nil {
		m["content"] = string(s.Content)
	}
	if s.Info != nil && s.Info.Share {
		sharers := s.Sharers
		if sharers == nil {
			sharers = []Sharer{}
		}
		m["sharers"] = sharers
		used, known := Budget(s.Sharers)
		if known {
			m["budgetUsedMiB"] = used
		} else {
			m["budgetUsedMiB"] = nil
		}
	}
	return m
}
