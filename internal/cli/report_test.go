package cli

import (
	"testing"
	"time"
)

func TestReportTime(t *testing.T) {
	now := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	local := func(y int, m time.Month, d, h, min int) time.Time {
		return time.Date(y, m, d, h, min, 0, 0, time.Local)
	}
	for _, c := range []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: "7d", want: now.Add(-7 * 24 * time.Hour)},
		{in: "2w", want: now.Add(-14 * 24 * time.Hour)},
		{in: "0d", want: now},
		{in: "36h", want: now.Add(-36 * time.Hour)},
		{in: "90m", want: now.Add(-90 * time.Minute)},
		{in: "1h30m", want: now.Add(-90 * time.Minute)},
		{in: " 7d ", want: now.Add(-7 * 24 * time.Hour)},
		{in: "2026-12-01T08:00:00Z", want: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)},
		{in: "2026-12-01T08:00:00+01:00", want: time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)},
		{in: "2026-12-01T08:00:00.5Z", want: time.Date(2026, 12, 1, 8, 0, 0, 5e8, time.UTC)},
		{in: "2026-12-01", want: local(2026, 12, 1, 0, 0)},
		{in: "2026-12-01 08:30", want: local(2026, 12, 1, 8, 30)},
		{in: "2026-12-01T08:30", want: local(2026, 12, 1, 8, 30)},
		{in: "", bad: true},
		{in: "yesterday", bad: true},
		{in: "-7d", bad: true},
		{in: "-5m", bad: true},
		{in: "7x", bad: true},
		{in: "d", bad: true},
		{in: "99999999d", bad: true},
		{in: "2026-13-01", bad: true},
		{in: "2026-12-01T25:00:00Z", bad: true},
	} {
		got, err := reportTime(c.in, now)
		switch {
		case c.bad && err == nil:
			t.Errorf("reportTime(%q) = %v, want an error", c.in, got)
		case !c.bad && err != nil:
			t.Errorf("reportTime(%q): %v", c.in, err)
		case !c.bad && !got.Equal(c.want):
			t.Errorf("reportTime(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}
