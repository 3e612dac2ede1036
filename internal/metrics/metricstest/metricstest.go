// Package metricstest reads Prometheus' text format back, for tests of
// what package metrics and `gpuexec metrics` write: with Prometheus' own
// parser (expfmt), so that what passes here is what a Prometheus server or
// node_exporter's textfile collector reads.
package metricstest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Samples are the samples of a text, each by its series, Key's form:
// name{label="value",...} with the labels sorted and the values as they
// are (not escaped); the bare name for a series without labels.
type Samples map[string]float64

// Key is the series name with labels (pairs of name and value), as
// Samples holds it.
func Key(name string, labels ...string) string {
	if len(labels) == 0 {
		return name
	}
	var pairs []string
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, labels[i]+"="+fmt.Sprintf("%q", labels[i+1]))
	}
	slices.Sort(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// Parse reads text with expfmt's parser (UTF-8 names allowed, as
// Prometheus reads them), failing t when it cannot, when a series is
// given twice, or when a family has no HELP or TYPE. It returns the
// samples and the families' help texts by name.
func Parse(t testing.TB, text string) (Samples, map[string]string) {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the metrics do not parse: %v\n%s", err, text)
	}
	s, help := Samples{}, map[string]string{}
	for name, f := range fams {
		if f.GetHelp() == "" || f.Type == nil {
			t.Errorf("%s has no HELP or TYPE", name)
		}
		help[name] = f.GetHelp()
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, l.GetName(), l.GetValue())
			}
			k := Key(name, labels...)
			if _, ok := s[k]; ok {
				t.Errorf("%s is given twice", k)
			}
			s[k] = value(f.GetType(), m)
		}
	}
	return s, help
}

func value(t dto.MetricType, m *dto.Metric) float64 {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	}
	return m.GetUntyped().GetValue()
}

// Names are the metric names of s, sorted, each once.
func (s Samples) Names() []string {
	var names []string
	for k := range s {
		name, _, _ := strings.Cut(k, "{")
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}
