package cli

import (
	"bytes"
	"strings"
	"testing"
)

// A flag or GPUEXEC_* variable that does not parse is one line naming it,
// what was given and what is expected, status 125 (run in-process: parsing
// fails before anything else happens).
func TestUsageErrors(t *testing.T) {
	const durationHint = "is not a duration; use 5s, 20m or 1h30m (units: ms, s, m, h)"
	cases := []struct {
		args []string
		env  [2]string // a variable to set, if any
		want string    // stderr, whole
	}{
		{args: []string{"--wait", "5", "--", "true"}, want: `--wait: "5" ` + durationHint + ", or forever"},
		{args: []string{"--wait", "1d", "--", "true"}, want: `--wait: "1d" ` + durationHint + ", or forever"},
		{args: []string{"--wait=90", "--", "true"}, want: `--wait: "90" ` + durationHint + ", or forever"},
		{args: []string{"-timeout", "x", "--", "true"}, want: `--timeout: "x" ` + durationHint},
		{args: []string{"run", "--kill-after", "10", "--", "true"}, want: `--kill-after: "10" ` + durationHint + ", or never"},
		{args: []string{"status", "--stale", "2d"}, want: `--stale: "2d" ` + durationHint},
		{args: []string{"clear", "--stale", "2d"}, want: `--stale: "2d" ` + durationHint},
		{args: []string{"--", "true"}, env: [2]string{"GPUEXEC_WAIT", "5"}, want: `GPUEXEC_WAIT: "5" ` + durationHint + ", or forever"},
		{args: []string{"status"}, env: [2]string{"GPUEXEC_STALE", "1d"}, want: `GPUEXEC_STALE: "1d" ` + durationHint},
		{args: []string{"--need", "two", "--", "true"}, want: `--need: "two" is not a whole number`},
		{args: []string{"--", "true"}, env: [2]string{"GPUEXEC_NEED", "two"}, want: `GPUEXEC_NEED: "two" is not a whole number`},
		{args: []string{"--log-json=maybe", "--", "true"}, want: `--log-json: "maybe" is not true or false`},
		{args: []string{"--wait"}, want: `--wait needs a duration, such as 5s, 20m or 1h30m`},
		{args: []string{"--owner"}, want: `--owner needs a value (see gpuexec --help)`},
		{args: []string{"--bogus", "--", "true"}, want: `unknown flag --bogus (see gpuexec --help)`},
		{args: []string{"status", "--bogus"}, want: `unknown flag --bogus (see gpuexec status --help)`},
		{args: []string{"--wait", "\x1b[2J", "--", "true"}, want: `--wait: "\x1b[2J" ` + durationHint + ", or forever"},
		// Negative however small, past the longest duration (issue #25).
		{args: []string{"--timeout", "-0.0000000001s", "--", "true"}, want: `--timeout: "-0.0000000001s" is negative`},
		{args: []string{"--wait", "-1", "--", "true"}, want: `--wait: "-1" is negative; to wait without end, write forever`},
		{args: []string{"--", "true"}, env: [2]string{"GPUEXEC_KILL_AFTER", "-1ns"}, want: `GPUEXEC_KILL_AFTER: "-1ns" is negative; to send no SIGKILL, write never`},
		{args: []string{"status", "--stale", "-1ns"}, want: `--stale: "-1ns" is negative`},
		{args: []string{"--wait", "10000000h", "--", "true"}, want: `--wait: "10000000h" is longer than the longest duration, 2562047h; to wait without end, write forever`},
		{args: []string{"--", "true"}, env: [2]string{"GPUEXEC_TIMEOUT", "10000000h"}, want: `GPUEXEC_TIMEOUT: "10000000h" is longer than the longest duration, 2562047h`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " ")+" "+tc.env[0], func(t *testing.T) {
			if tc.env[0] != "" {
				t.Setenv(tc.env[0], tc.env[1])
			}
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"gpuexec"}, tc.args...), &stdout, &stderr)
			if code != 125 {
				t.Errorf("status %d, want 125", code)
			}
			if want := "gpuexec: " + tc.want + "\n"; stderr.String() != want {
				t.Errorf("stderr\n%q, want\n%q", stderr.String(), want)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout %q", stdout.String())
			}
		})
	}
}
