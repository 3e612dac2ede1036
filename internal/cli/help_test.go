package cli

import (
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

func TestVersionString(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tt := range []struct {
		name string
		set  string
		bi   *debug.BuildInfo
		want string
	}{
		{"nothing", "", nil, "dev"},
		{"ldflags", "v1.2.3", nil, "v1.2.3"},
		{"devel", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"go install", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{"ldflags win", "v9", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v9"},
		{"checkout", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(
			"vcs", "git", "vcs.revision", "0123456789abcdef0123456789abcdef01234567", "vcs.time", "2026-11-30T23:59:00Z", "vcs.modified", "true")},
			"dev (rev 0123456789ab, 2026-11-30, modified)"},
		{"clean checkout", "v1.2.3", &debug.BuildInfo{Settings: vcs(
			"vcs.revision", "abc1234", "vcs.time", "2026-11-30T10:00:00Z", "vcs.modified", "false")},
			"v1.2.3 (rev abc1234, 2026-11-30)"},
		{"revision alone", "", &debug.BuildInfo{Settings: vcs("vcs.revision", "abc1234", "vcs.time", "garbage")}, "dev (rev abc1234)"},
	} {
		if got := versionString(tt.set, tt.bi); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestFlagHelp(t *testing.T) {
	for _, tt := range []struct {
		f    cli.Flag
		want string // a prefix of the help line
		has  string
	}{
		{durationFlag("wait", 150*time.Minute, "WAIT", "u", waitForever), "--wait DURATION\t", "(default: 2h30m)"},
		{durationFlag("timeout", 0, "TIMEOUT", "u", nil), "--timeout DURATION\t", "(default: 0)"},
		{durationFlag("kill-after", 10*time.Second, "KILL_AFTER", "u", killNever), "--kill-after DURATION\t", "(default: 10s)"},
		{durationFlag("stale", 90*time.Minute, "STALE", "u", nil), "--stale DURATION\t", "(default: 1h30m)"},
		{durationFlag("hour", time.Hour, "HOUR", "u", nil), "--hour DURATION\t", "(default: 1h)"},
		{&cli.StringFlag{Name: "log-format", Value: "text", Usage: "u"}, "--log-format text|json\t", ""},
		{&cli.IntFlag{Name: "need", Value: 1, Usage: "u"}, "--need N\t", ""},
		{&cli.IntFlag{Name: "log-max-size", Usage: "at this many `MB`"}, "--log-max-size MB\t", ""},
		{&cli.StringFlag{Name: "owner", Usage: "u"}, "--owner NAME\t", ""},
		{&cli.BoolFlag{Name: "json", Usage: "u"}, "--json\t", ""},
	} {
		got := cli.FlagStringer(tt.f)
		if !strings.HasPrefix(got, tt.want) || !strings.Contains(got, tt.has) {
			t.Errorf("help of --%s: %q, want it to begin with %q and hold %q", tt.f.Names()[0], got, tt.want, tt.has)
		}
	}
}
