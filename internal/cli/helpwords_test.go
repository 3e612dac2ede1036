package cli

// Black-box tests of help, version, completion and the help text of a few
// flags.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The help of a few flags: --gpu-count has one default, --log-format names
// its values, status's --reserve says what it is for there.
func TestFlagHelpLines(t *testing.T) {
	t.Parallel()
	help := gx(t, nil, "--help")
	wantCode(t, help, 0)
	status := gx(t, nil, "status", "--help")
	wantCode(t, status, 0)
	line := func(out, flag string) string {
		for _, l := range lines(out) {
			if strings.HasPrefix(strings.TrimSpace(l), flag+" ") {
				return l
			}
		}
		t.Fatalf("no line for %s in:\n%s", flag, out)
		return ""
	}
	for _, out := range []string{help.stdout, status.stdout} {
		if l := line(out, "--gpu-count"); strings.Count(l, "default") != 1 {
			t.Errorf("--gpu-count has more than one default: %s", l)
		}
	}
	if l := line(help.stdout, "--log-format"); !strings.Contains(l, "--log-format text|json ") {
		t.Errorf("--log-format does not name its values: %s", l)
	}
	if l := line(status.stdout, "--reserve"); !strings.Contains(l, "left to share") {
		t.Errorf("status --reserve does not say what it is for in status: %s", l)
	}
	for _, s := range []string{"--wait DURATION", "forever", "--kill-after DURATION", "never"} {
		if !strings.Contains(help.stdout, s) {
			t.Errorf("--help lacks %q", s)
		}
	}
}

// The README's Quick tour runs on any machine: the commands it runs under
// gpuexec are ones every machine has, not nvidia-smi.
func TestQuickTourNeedsNoGPU(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(repoFile("README.md"))
	if err != nil {
		t.Skip(err)
	}
	_, tour, _ := strings.Cut(string(b), "## Quick tour\n")
	tour, _, _ = strings.Cut(tour, "\n## ")
	everywhere := map[string]bool{"sleep": true, "echo": true, "true": true, "false": true, "date": true, "sh": true}
	n := 0
	for _, m := range regexp.MustCompile(`gpuexec [^\n#]*?-- (\S+)`).FindAllStringSubmatch(tour, -1) {
		n++
		if !everywhere[m[1]] {
			t.Errorf("the Quick tour runs %q, which a machine may not have: %s", m[1], m[0])
		}
	}
	if n == 0 {
		t.Fatalf("no gpuexec ... -- COMMAND in the Quick tour:\n%s", tour)
	}
}

// The README's "What happened this week" commands work as pasted: on a lock
// one job has used (GPUEXEC_LOCK, as a user's setting), each exits 0 and
// says something; the metrics' textfile folder is a temporary one here.
func TestWeekCommandsInTheREADME(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(repoFile("README.md"))
	if err != nil {
		t.Skip(err)
	}
	_, week, _ := strings.Cut(string(b), "## What happened this week\n")
	week, _, _ = strings.Cut(week, "\n## ")
	_, lock := lockIn(t)
	env := []string{"GPUEXEC_LOCK=" + lock}
	wantCode(t, gx(t, append([]string{role("exit")}, env...), "--owner", "reels", "--slug", "ep1", "--", helperBin, "0"), 0)
	cwd, textfiles := t.TempDir(), t.TempDir()
	n := 0
	for _, m := range regexp.MustCompile(`(?m)^    gpuexec ([^#\n]*)`).FindAllStringSubmatch(week, -1) {
		n++
		line := strings.ReplaceAll(m[1], "/var/lib/node_exporter/textfile_collector", textfiles)
		cmd := gpuexecCmd(env, strings.Fields(line)...)
		cmd.Dir = cwd
		r := startProc(t, cmd).wait(t)
		if r.code != 0 || r.stdout == "" && !strings.Contains(line, "--html") && !strings.Contains(line, "--textfile") {
			t.Errorf("gpuexec %s: exit %d\nstdout:\n%s\nstderr:\n%s", line, r.code, r.stdout, r.stderr)
		}
	}
	if n < 4 {
		t.Fatalf("%d gpuexec commands in the README's What happened this week, want report, top, metrics:\n%s", n, week)
	}
	for _, f := range []string{filepath.Join(cwd, "week.html"), filepath.Join(textfiles, "gpuexec.prom")} {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}
