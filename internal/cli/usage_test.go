package cli

import (
	"bytes"
	"testing"
)

// A value that does not parse is quoted in its one line of error, control
// characters escaped so that they cannot act on the terminal (run
// in-process: a script cannot pass an escape character as an argument;
// testdata/script/flag_errors.txtar and durations_out_of_range.txtar have
// the other usage errors).
func TestUsageErrorEscapesTheValue(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"gpuexec", "--wait", "\x1b[2J", "--", "true"}, &stdout, &stderr)
	if code != 125 {
		t.Errorf("status %d, want 125", code)
	}
	const want = `gpuexec: --wait: "\x1b[2J" is not a duration; use 5s, 20m or 1h30m (units: ms, s, m, h), or forever` + "\n"
	if stderr.String() != want {
		t.Errorf("stderr\n%q, want\n%q", stderr.String(), want)
	}
	if stdout.Len() > 0 {
		t.Errorf("stdout %q", stdout.String())
	}
}
