//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestMain lets the test binary play the benchmark's roles: run() starts
// os.Executable(), which here is this binary.
func TestMain(m *testing.M) {
	if isFakeSMI() {
		os.Exit(fakeSMI(os.Args[1:]))
	}
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// TestQuick runs the whole benchmark in -quick mode: it builds gpuexec from
// this checkout, measures all three contenders, and must find no
// overlapping critical sections and print every row.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole benchmark in -quick mode (about 25 s)")
	}
	var missing []string
	for _, tool := range []string{"flock", "node"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		t.Skipf("needs %s on PATH", strings.Join(missing, " and "))
	}
	// This binary, built with -race, plays the critical sections: do not
	// let the race detector sleep a second at each exit.
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))

	var stdout, stderr bytes.Buffer
	if code := run([]string{"-quick"}, &stdout, &stderr); code != 0 {
		t.Fatalf("bench -quick exited %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	out := stdout.String()
	t.Logf("\n%s", out)

	rows := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "| (") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 6 {
			t.Errorf("row has %d cells, want 6 (measurement, 3 contenders, target, met): %s", len(cells), line)
			continue
		}
		rows[cells[0]] = cells
	}
	for _, want := range []string{
		"(a) overhead of `-- true`",
		"(a) overhead median ÷ flock's",
		"(a) floor: Go with gpuexec's libraries",
		"(a) overhead median ÷ the Go floor's",
		"(a) floor with the lock's file work and signals",
		"(b) handoff gap p50",
		"(b) handoff gap p90",
		"(b) handoff gap p99",
		"(b) handoff gap max",
		"(b) handoff gap p50 ÷ flock's",
		"(b) CPU per critical section",
		"(c) overlapping critical sections",
		"(d) CPU of one waiter",
		"(e) RSS of the wrapper",
		"(f) FIFO",
		"(g) pre-queued chain gap p50",
		"(g) pre-queued chain gap p90",
		"(g) overlapping critical sections",
		"(h) CPU of 1 queued waiter ",
		"(h) CPU of 10 queued waiters",
	} {
		var found []string
		for name, cells := range rows {
			if strings.HasPrefix(name, want) {
				found = cells
			}
		}
		if found == nil {
			t.Errorf("no row %q", want)
			continue
		}
		if strings.HasPrefix(want, "(a) floor") && !regexp.MustCompile(`^[0-9.]+ \([0-9.]+×\)$`).MatchString(found[1]) {
			t.Errorf("%s: %q, want its median and a ratio", want, found[1])
		}
		if strings.HasPrefix(want, "(a) overhead median ÷ the Go floor's") && !regexp.MustCompile(`^[0-9.]+×$`).MatchString(found[1]) {
			t.Errorf("overhead ÷ the floor: %q, want a ratio", found[1])
		}
		if strings.HasPrefix(want, "(b) CPU") {
			for i, c := range found[1:4] {
				if _, err := strconv.ParseFloat(c, 64); err != nil {
					t.Errorf("CPU per section of contender %d: %q, want milliseconds", i+1, c)
				}
			}
		}
		if strings.HasPrefix(want, "(g) pre-queued") {
			for i, c := range found[1:4] {
				if !regexp.MustCompile(`^[0-9.]+ \([0-9.]+×\)$`).MatchString(c) {
					t.Errorf("%s of contender %d: %q, want milliseconds and the ratio to flock's", want, i+1, c)
				}
			}
		}
		if strings.HasPrefix(want, "(h)") {
			for i, c := range found[1:4] {
				if !regexp.MustCompile(`^[0-9.]+% \([0-9.]+ s\)$`).MatchString(c) {
					t.Errorf("%s of contender %d: %q, want a %% of a core and seconds", want, i+1, c)
				}
			}
		}
		if strings.HasPrefix(want, "(c)") || strings.HasPrefix(want, "(g) overlapping") {
			for i, c := range found[1:4] {
				if !strings.HasPrefix(c, "0 of ") || c == "0 of 0" {
					t.Errorf("overlaps of contender %d: %q, want 0 of some sections", i+1, c)
				}
			}
		}
	}
	if len(rows) != 20 {
		t.Errorf("%d rows, want 20", len(rows))
	}
}
