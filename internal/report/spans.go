package report

import (
	"cmp"
	"slices"
	"time"
)

// span is an interval of time [from, to), as offsets from the start of the
// report's window: two numbers, no pointer for the collector to follow
// (a report may hold one for each device of each job).
type span struct{ from, to time.Duration }

// cut is [*from, to) cut to [since, until), as offsets from since, and
// whether anything is left; false for a nil from.
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
	return span{f.Sub(since), t.Sub(since)}, true
}

// union is the union of spans, as disjoint spans in order, in spans' own
// memory (spans is reordered and overwritten).
func union(spans []span) []span {
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	out := spans[:0]
	for _, s := range spans {
		if s.to <= s.from {
			continue
		}
		if n := len(out); n > 0 && s.from <= out[n-1].to {
			if s.to > out[n-1].to {
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
		for j < len(b) && b[j].to <= from {
			j++
		}
		for k := j; k < len(b) && b[k].from < s.to; k++ {
			if b[k].from > from {
				out = append(out, span{from, b[k].from})
			}
			if b[k].to > from {
				from = b[k].to
			}
		}
		if s.to > from {
			out = append(out, span{from, s.to})
		}
	}
	return out
}

// length is the total length of disjoint spans, in milliseconds.
func length(spans []span) int64 {
	var d time.Duration
	for _, s := range spans {
		d += s.to - s.from
	}
	return d.Milliseconds()
}

// compact is spans as their union once they have doubled since the last
// union (at least compactMin of them): the spans of a row stay as few as
// the disjoint times they cover, whatever the number of jobs.
func compact(spans []span, last *int) []span {
	if len(spans) < max(compactMin, 2*(*last)) {
		return spans
	}
	spans = union(spans)
	*last = len(spans)
	return spans
}

const compactMin = 1024
