package cli

// Black-box tests of help, version, completion and the help text of a few
// flags.

import (
	"os"
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
