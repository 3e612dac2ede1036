package cli

import (
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/supervisor"
)

func TestParseDuration(t *testing.T) {
	const (
		negative = "is negative"
		notOne   = "is not a duration; use 5s, 20m or 1h30m (units: ms, s, m, h)"
		tooLong  = "is longer than the longest duration, 2562047h"
	)
	for _, tt := range []struct {
		s    string
		e    *endless
		want time.Duration
		err  string // "" when it parses
	}{
		{s: "0", want: 0},
		{s: "0s", want: 0},
		{s: "0.000s", want: 0},
		{s: "1ns", want: time.Nanosecond},
		{s: "90m", want: 90 * time.Minute},
		{s: "1h30m", want: 90 * time.Minute},
		{s: "+2s", want: 2 * time.Second},
		// Below a nanosecond and positive: rounded up, as timeout(1).
		{s: "0.0000000001s", want: time.Nanosecond},
		{s: "+0.0000000001s", want: time.Nanosecond},
		{s: "0.5ns", want: time.Nanosecond},
		{s: "0.00001us", want: time.Nanosecond},
		// A leading "-", however small.
		{s: "-0.0000000001s", err: negative},
		{s: "-1ns", err: negative},
		{s: "-0", err: negative},
		{s: "-1s", err: negative},
		{s: "-1", e: waitForever, err: negative + "; to wait without end, write forever"},
		{s: "-1s", e: killNever, err: negative + "; to send no SIGKILL, write never"},
		// Past Go's longest duration, and at it.
		{s: "10000000h", err: tooLong},
		{s: "2562048h", err: tooLong},
		{s: "9223372036854775808ns", err: tooLong},
		{s: "10000000h", e: waitForever, err: tooLong + "; to wait without end, write forever"},
		{s: "2562047h", want: 2562047 * time.Hour},
		{s: "2562047h47m16.854775807s", want: supervisor.Forever},
		// Not durations.
		{s: "5", err: notOne},
		{s: "1d", err: notOne},
		{s: "", err: notOne},
		{s: " 5s", err: notOne},
		{s: "forever", err: notOne},
		{s: "never", e: waitForever, err: notOne + ", or forever"},
		{s: "forever", e: killNever, err: notOne + ", or never"},
		// Without end.
		{s: "forever", e: waitForever, want: supervisor.Forever},
		{s: "INF", e: waitForever, want: supervisor.Forever},
		{s: "Infinity", e: waitForever, want: supervisor.Forever},
		{s: "never", e: killNever, want: supervisor.Forever},
	} {
		got, err := parseDuration(tt.s, tt.e)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("parseDuration(%q) = %v, %v; want %v", tt.s, got, err, tt.want)
		case tt.err != "" && (err == nil || err.Error() != tt.err):
			t.Errorf("parseDuration(%q) = %v, %v; want the error %q", tt.s, got, err, tt.err)
		}
	}
}

// A duration flag's value reads back what it shows (the help's default,
// and a flag given before a subcommand, which is set again from it).
func TestDurationValueRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		e *endless
		s string
	}{
		{nil, "0s"}, {nil, "1ns"}, {nil, "2h30m0s"}, {waitForever, "forever"}, {killNever, "never"},
		{nil, "2562047h47m16.854775807s"},
	} {
		v := &durationValue{endless: tt.e}
		if err := v.Set(tt.s); err != nil {
			t.Fatalf("Set(%q): %v", tt.s, err)
		}
		if v.String() != tt.s {
			t.Errorf("Set(%q) shows %q", tt.s, v.String())
		}
		w := &durationValue{endless: tt.e}
		if err := w.Set(v.String()); err != nil || w.d != v.d {
			t.Errorf("Set(%q) again: %v, %v; want %v", v.String(), w.d, err, v.d)
		}
	}
}
