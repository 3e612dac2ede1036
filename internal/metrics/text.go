package metrics

import (
	"bufio"
	"cmp"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Type is a family's type in the text format.
type Type uint8

// The types gpuexec's metrics have.
const (
	Gauge Type = iota
	Counter
)

// Family is one metric: its name, help text, type, label names, and its
// samples. The names (metric and labels) are Prometheus' legacy names
// ([a-zA-Z_:][a-zA-Z0-9_:]*, labels without the colon), written as they
// are; the help text and the label values are any valid UTF-8, escaped
// as the format wants.
type Family struct {
	Name, Help string
	Type       Type
	LabelNames []string
	Samples    []Sample
}

// Sample is one series of a family: its label values, in the order of
// the family's LabelNames, and its value.
type Sample struct {
	LabelValues []string
	Value       float64
}

// WriteText writes fams in Prometheus' text exposition format, version
// 0.0.4, byte for byte as client_golang writes what its registry gathers
// (prometheus.WriteToTextfile, expfmt.MetricFamilyToText): the families
// sorted by name, those without samples left out; HELP then TYPE; each
// sample's labels sorted by name, the samples sorted by their label
// values in that order; help texts with \ and newline escaped, label
// values with \, " and newline; values as Go's %g with the fewest digits
// that read back exactly, NaN, +Inf and -Inf. fams are not changed.
//
// Samples of one family must differ in their label values, and every
// sample must have as many values as the family has label names: the
// format has no way to say otherwise (a sample short of values is given
// empty ones).
func WriteText(w io.Writer, fams []Family) error {
	bw := bufio.NewWriter(w)
	order := make([]*Family, 0, len(fams))
	for i := range fams {
		if len(fams[i].Samples) > 0 {
			order = append(order, &fams[i])
		}
	}
	slices.SortStableFunc(order, func(a, b *Family) int { return strings.Compare(a.Name, b.Name) })
	for _, f := range order {
		writeFamily(bw, f)
	}
	return bw.Flush()
}

func writeFamily(w *bufio.Writer, f *Family) {
	w.WriteString("# HELP ")
	w.WriteString(f.Name)
	w.WriteByte(' ')
	helpEscaper.WriteString(w, f.Help)
	w.WriteString("\n# TYPE ")
	w.WriteString(f.Name)
	if f.Type == Counter {
		w.WriteString(" counter\n")
	} else {
		w.WriteString(" gauge\n")
	}
	// by are the label indexes in the order of their names.
	by := make([]int, len(f.LabelNames))
	for i := range by {
		by[i] = i
	}
	slices.SortStableFunc(by, func(i, j int) int { return strings.Compare(f.LabelNames[i], f.LabelNames[j]) })
	value := func(s *Sample, i int) string {
		if i < len(s.LabelValues) {
			return s.LabelValues[i]
		}
		return ""
	}
	samples := make([]*Sample, len(f.Samples))
	for i := range f.Samples {
		samples[i] = &f.Samples[i]
	}
	slices.SortStableFunc(samples, func(a, b *Sample) int {
		for _, i := range by {
			if c := cmp.Compare(value(a, i), value(b, i)); c != 0 {
				return c
			}
		}
		return 0
	})
	for _, s := range samples {
		w.WriteString(f.Name)
		for n, i := range by {
			if n == 0 {
				w.WriteByte('{')
			} else {
				w.WriteByte(',')
			}
			w.WriteString(f.LabelNames[i])
			w.WriteString(`="`)
			valueEscaper.WriteString(w, value(s, i))
			w.WriteByte('"')
		}
		if len(by) > 0 {
			w.WriteByte('}')
		}
		w.WriteByte(' ')
		w.WriteString(formatFloat(s.Value))
		w.WriteByte('\n')
	}
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// formatFloat is a value as expfmt writes it.
func formatFloat(f float64) string {
	switch {
	case f == 1:
		return "1"
	case f == 0:
		return "0"
	case f == -1:
		return "-1"
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, +1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
