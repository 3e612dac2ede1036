package metrics

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/gpuexec/gpuexec/internal/metrics/metricstest"
)

// viaClientGolang is fams as client_golang writes them: const metrics in
// a pedantic registry, gathered, each family through
// expfmt.MetricFamilyToText (what prometheus.WriteToTextfile does).
func viaClientGolang(t *testing.T, fams []Family) string {
	t.Helper()
	var ms collector
	for _, f := range fams {
		d := prometheus.NewDesc(f.Name, f.Help, f.LabelNames, nil)
		typ := prometheus.GaugeValue
		if f.Type == Counter {
			typ = prometheus.CounterValue
		}
		for _, s := range f.Samples {
			m, err := prometheus.NewConstMetric(d, typ, s.Value, s.LabelValues...)
			if err != nil {
				t.Fatalf("client_golang refuses %s %q: %v", f.Name, s.LabelValues, err)
			}
			ms = append(ms, m)
		}
	}
	r := prometheus.NewPedanticRegistry()
	r.MustRegister(ms)
	mfs, err := r.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// A collector hands out metrics made beforehand, undescribed: the
// registry takes it unchecked and Gather checks what it gives.
type collector []prometheus.Metric

func (collector) Describe(chan<- *prometheus.Desc) {}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c {
		ch <- m
	}
}

// writeText is fams as WriteText writes them, failing t unless it is
// byte for byte what client_golang writes.
func writeText(t *testing.T, fams []Family) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteText(&b, fams); err != nil {
		t.Fatal(err)
	}
	if want := viaClientGolang(t, fams); b.String() != want {
		t.Errorf("WriteText differs from client_golang:\n--- WriteText\n%s--- client_golang\n%s", b.String(), want)
	}
	return b.String()
}

func TestWriteTextAsClientGolang(t *testing.T) {
	long := strings.Repeat("é", 100)
	hostile := []string{
		"", "plain", `say "hi"`, `back\slash`, `\\`, `\"`, "new\nline", "\n", "tab\there", "cr\rhere",
		"# HELP x y", "x} 1\ny 2", "é", "日本", "😀", "\u202e", "\x7f",
		Label("bad\xffutf8"), Label("\xff\xfe"), Label("\x00\x1b[31m"), Label(strings.Repeat("x", 300)),
		Label(long), Label("a" + long), Label(strings.Repeat(`"`, 200)), Label(strings.Repeat(`\`, 200)),
	}
	values := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1e-9, 1e21, 123456789012345678, 1 << 53, 1<<53 + 1,
		math.MaxFloat64, math.SmallestNonzeroFloat64, -2.5, 1e20, 1e-5, 1e-4, 100000, 1234567, 121.5, 3600,
		math.NaN(), math.Inf(1), math.Inf(-1)}
	var hostileSamples, valueSamples, pairSamples []Sample
	for i, h := range hostile {
		hostileSamples = append(hostileSamples, Sample{[]string{h, hostile[len(hostile)-1-i]}, float64(i)})
	}
	for i, v := range values {
		valueSamples = append(valueSamples, Sample{[]string{string(rune('z' - i))}, v})
	}
	// Alike in the first label by name (a), unsorted in the second.
	for _, b := range []string{"9", "10", "1", "", "b", "B", "é", "a"} {
		for _, a := range []string{"y", "x"} {
			pairSamples = append(pairSamples, Sample{[]string{b, a, "c"}, 1})
		}
	}
	tests := []struct {
		name string
		fams []Family
	}{
		{"no family", nil},
		{"no sample", []Family{{Name: "empty", Help: "Nothing.", LabelNames: []string{"a"}}}},
		{"no label", []Family{{Name: "one", Help: "One.", Samples: []Sample{{nil, 42}}}}},
		{"counter", []Family{{Name: "jobs_total", Help: "Jobs.", Type: Counter, LabelNames: []string{"owner"},
			Samples: []Sample{{[]string{"bo"}, 3}, {[]string{"ana"}, 0}}}}},
		{"hostile label values", []Family{{Name: "hostile", Help: "Hostile.", LabelNames: []string{"owner", "lock"}, Samples: hostileSamples}}},
		{"values", []Family{
			{Name: "gauges", Help: "Values.", LabelNames: []string{"v"}, Samples: valueSamples},
			{Name: "counters_total", Help: "Values.", Type: Counter, LabelNames: []string{"v"}, Samples: valueSamples},
		}},
		{"labels sorted by name, samples by their values", []Family{{Name: "pairs", Help: "Pairs.",
			LabelNames: []string{"b", "a", "c"}, Samples: pairSamples}}},
		{"help texts", []Family{
			{Name: "h1", Help: `a \ b`, Samples: []Sample{{nil, 1}}},
			{Name: "h2", Help: "line\nline", Samples: []Sample{{nil, 1}}},
			{Name: "h3", Help: `\n is not a newline, "quotes" stay, \\`, Samples: []Sample{{nil, 1}}},
			{Name: "h4", Help: "tab\t, é, 😀, \u202e", Samples: []Sample{{nil, 1}}},
		}},
		{"families sorted by name", []Family{
			{Name: "zz", Help: "Z.", Samples: []Sample{{nil, 1}}},
			{Name: "a_b", Help: "A.", Samples: []Sample{{nil, 2}}},
			{Name: "a:b", Help: "Colon.", Type: Counter, Samples: []Sample{{nil, 3}}},
			{Name: "A", Help: "Upper.", Samples: []Sample{{nil, 4}}},
			{Name: "_a", Help: "Underscore.", Samples: []Sample{{nil, 5}}},
			{Name: "m", Help: "Empty.", LabelNames: []string{"x"}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := writeText(t, tc.fams)
			// What Prometheus reads back is what was given (NaN aside).
			samples, _ := metricstest.Parse(t, got)
			n := 0
			for _, f := range tc.fams {
				n += len(f.Samples)
			}
			if len(samples) != n {
				t.Errorf("%d samples read back, want %d", len(samples), n)
			}
		})
	}
}

// WriteText does not change the families it is given.
func TestWriteTextLeavesFamilies(t *testing.T) {
	fams := []Family{
		{Name: "b", Help: "B.", LabelNames: []string{"y", "x"}, Samples: []Sample{{[]string{"2", "1"}, 1}, {[]string{"1", "2"}, 2}}},
		{Name: "a", Help: "A.", Samples: []Sample{{nil, 1}}},
	}
	var b bytes.Buffer
	if err := WriteText(&b, fams); err != nil {
		t.Fatal(err)
	}
	if fams[0].Name != "b" || fams[0].LabelNames[0] != "y" || fams[0].Samples[0].LabelValues[0] != "2" {
		t.Errorf("WriteText changed its input: %+v", fams)
	}
}
