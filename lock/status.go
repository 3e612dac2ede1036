package lock

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Describe is the one human line `gpuexec status` prints: "free", or the
// holder, since when, the heartbeat's age, and alive or stale and why.
//
// Each live waiter adds a line: "  1. reels/tts (pid 77) waiting since 20:21".
func (s *Status) Describe() string {
	var b strings.Builder
	b.WriteString(s.describeLock())
	for _, w := range s.Queue {
		if !w.Alive {
			continue
		}
		fmt.Fprintf(&b, "\n  %d. %s/%s (pid %d", w.Position, printable(w.Owner), printable(w.Slug), w.PID)
		if !sameHost(w.Host) {
			b.WriteString(" on " + printable(w.Host))
		}
		b.WriteString(") waiting")
		if t, err := time.Parse(time.RFC3339Nano, w.Since); err == nil {
			b.WriteString(" since " + t.Local().Format("15:04:05"))
		}
	}
	return b.String()
}

func (s *Status) describeLock() string {
	if s.State == StateFree {
		return "free"
	}
	if s.orphan != "" {
		return "held by " + s.Holder() + ", alive (" + s.Reason + ")"
	}
	var b strings.Builder
	if s.State == StateStale {
		b.WriteString("stale: ")
	}
	b.WriteString("held by " + s.Holder())
	if s.Info != nil {
		if t := s.Info.Acquired(); !t.IsZero() {
			b.WriteString(" since " + fmtStamp(t))
		}
	}
	fmt.Fprintf(&b, ", heartbeat %s ago", fmtAge(s.HeartbeatAge))
	switch {
	case s.State == StateStale:
		b.WriteString("; " + s.Reason)
	case s.Reason != "":
		b.WriteString(", alive (" + s.Reason + ")")
	default:
		b.WriteString(", alive")
	}
	return b.String()
}

// JSON is the object `gpuexec status --json` prints: the record's fields as
// read (unknown ones included), then state, path, heartbeatAgeSeconds,
// alive, staleReason and queue (the live waiters in order), which win over
// record fields of the same name.
func (s *Status) JSON() map[string]any {
	m := make(map[string]any, len(s.Fields)+6)
	for k, v := range s.Fields {
		m[k] = v
	}
	m["state"] = string(s.State)
	m["path"] = s.Path
	m["alive"] = s.Alive
	queue := make([]Waiter, 0, len(s.Queue))
	for _, w := range s.Queue {
		if w.Alive {
			queue = append(queue, w)
		}
	}
	m["queue"] = queue
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
	return m
}
