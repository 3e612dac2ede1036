package report

import (
	"slices"
	"time"
)

// span is an interval of time [from, to).
type span struct{ from, to time.Time }

// cut is [*from, to) cut to [since, until), and whether anything is left;
// false for a nil from.
func cut(from *time.Time, to, since, until time.Time) (span, bool) {
	if from == nil {
		return span{}, false
	}
	f, t := *from, to
	if f.Before(since) {
		f = since
	}
	if t.After(until) {
		t = until
	}
	if t.Before(f) {
		return span{}, false
	}
	return span{f, t}, true
}

// union is the union of spans, as disjoint spans in order (spans is
// reordered).
func union(spans []span) []span {
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	var out []span
	for _, s := range spans {
		if !s.to.After(s.from) {
			continue
		}
		if n := len(out); n > 0 && !s.from.After(out[n-1].to) {
			if s.to.After(out[n-1].to) {
				out[n-1].to = s.to
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// minus is a less b, both disjoint and in order (as union returns them).
func minus(a, b []span) []span {
	var out []span
	j := 0
	for _, s := range a {
		from := s.from
		for j < len(b) && !b[j].to.After(from) {
			j++
		}
		for k := j; k < len(b) && b[k].from.Before(s.to); k++ {
			if b[k].from.After(from) {
				out = append(out, span{from, b[k].from})
			}
			if b[k].to.After(from) {
				from = b[k].to
			}
		}
		if s.to.After(from) {
			out = append(out, span{from, s.to})
		}
	}
	return out
}

// length is the total length of disjoint spans, in milliseconds.
func length(spans []span) int64 {
	var d time.Duration
	for _, s := range spans {
		d += s.to.Sub(s.from)
	}
	return d.Milliseconds()
}
