package cli

// Tests of the files in examples/: each is run against the real gpuexec
// where this machine can run it, and checked where it cannot (the Windows
// files: Wine has no PowerShell, and task-scheduler.cmd registers a task).
// Unix-only runs (Python, Node, cron, systemd, CI) are in
// examples_unix_test.go.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// example reads a file of examples/, in the repository (see repoFile),
// skipping where it is not there (a test binary run elsewhere).
func example(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(repoFile("examples/" + name))
	if err != nil {
		if os.IsNotExist(err) {
			t.Skipf("examples/%s is not here (the test binary runs outside the repository)", name)
		}
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "\r\n", "\n")
}

// needTool is the path of a program a test needs; without it the test
// skips, or fails under CI (which installs it: .ci/run).
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not on PATH; .ci/run installs it", name)
		}
		t.Skipf("%s is not on PATH", name)
	}
	return p
}

// runExampleFlags runs gpuexec with the flags an example passes it, on a
// job of this test, with --lock and --log moved to temporary files: the
// example's flags and values must all be ones gpuexec takes.
func runExampleFlags(t *testing.T, flags []string) {
	t.Helper()
	args := append([]string(nil), flags...)
	named := false
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--lock":
			_, args[i+1] = lockIn(t)
			named = true
		case "--log":
			args[i+1] = filepath.Join(t.TempDir(), "logs", "gpuexec.log")
		}
	}
	if !named {
		// An example that names its lock elsewhere (systemd's
		// Environment=GPUEXEC_LOCK=...) runs on one of the test's own,
		// never on the machine's default lock.
		_, lock := lockIn(t)
		args = append([]string{"--lock", lock}, args...)
	}
	args = append(args, "--", helperBin, "0")
	r := gx(t, []string{role("exit")}, args...)
	if r.code != 0 {
		t.Fatalf("gpuexec %q: exit status %d\n%s", flags, r.code, r.stderr)
	}
}

// splitWindows splits a Windows command line as programs built with the
// Microsoft C runtime do, for the simple cases an example holds: blanks
// separate arguments, double quotes group them.
func splitWindows(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, any := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, any = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if any || cur.Len() > 0 {
				out = append(out, cur.String())
			}
			cur.Reset()
			any = false
		default:
			cur.WriteRune(r)
		}
	}
	if any || cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// task-scheduler.cmd: the /TR command fits Task Scheduler's 261
// characters (and is as long as its comment says), and gpuexec takes its
// flags. Without --slug the task's slug is blender (see commandName).
func TestExampleTaskScheduler(t *testing.T) {
	t.Parallel()
	cmd := example(t, "windows/task-scheduler.cmd")
	m := regexp.MustCompile(`(?m)^  /TR "((?:[^"\\]|\\.)*)"\s*$`).FindStringSubmatch(cmd)
	if m == nil {
		t.Fatal(`no /TR "..." line in task-scheduler.cmd`)
	}
	tr := strings.ReplaceAll(m[1], `\"`, `"`)
	if len(tr) > 261 {
		t.Errorf("/TR is %d characters; Task Scheduler takes 261", len(tr))
	}
	if said := regexp.MustCompile(`\(this one is (\d+)\)`).FindStringSubmatch(cmd); said == nil || said[1] != strconv.Itoa(len(tr)) {
		t.Errorf("the comment says /TR is %v characters; it is %d", said, len(tr))
	}
	args := splitWindows(tr)
	if len(args) < 2 || !strings.HasSuffix(args[0], `\gpuexec.exe`) {
		t.Fatalf("/TR does not run gpuexec.exe: %q", args)
	}
	var flags []string
	for i, a := range args[1:] {
		if a == "--" {
			flags = args[1 : i+1]
			if job := args[i+2:]; len(job) == 0 || !strings.HasSuffix(job[0], `\blender.exe`) {
				t.Errorf("the task's job is %q, not blender.exe", job)
			}
			break
		}
	}
	if flags == nil {
		t.Fatalf("no -- in /TR: %q", args)
	}
	runExampleFlags(t, flags)
}

// render.ps1 cannot run here (no PowerShell on Linux or under Wine): its
// gpuexec call is checked as written. gpuexec's stderr lines must not
// reach PowerShell as error records under 'Stop' (PowerShell 5.1 ends the
// script at the first INFO line when stderr is redirected), and its flags
// must be gpuexec's.
func TestExampleRenderPS1(t *testing.T) {
	t.Parallel()
	ps := example(t, "windows/render.ps1")
	call := strings.Index(ps, "& $Gpuexec @gpuArgs")
	if call < 0 {
		t.Fatal("render.ps1 does not call & $Gpuexec @gpuArgs")
	}
	before, after := ps[:call], ps[call:]
	if i, j := strings.LastIndex(before, "$ErrorActionPreference = 'Continue'"), strings.LastIndex(before, "$ErrorActionPreference = 'Stop'"); i < 0 || i < j {
		t.Error("gpuexec is called under $ErrorActionPreference = 'Stop': its first stderr line can end the script")
	}
	line := after[:strings.Index(after, "\n")]
	if !strings.Contains(line, "2>&1 | ForEach-Object") || !strings.Contains(after, "[System.Management.Automation.ErrorRecord]") {
		t.Errorf("gpuexec's stderr is not turned back into plain lines: %s", line)
	}
	if !regexp.MustCompile(`(?s)\$status = \$LASTEXITCODE\s+\$ErrorActionPreference = 'Stop'`).MatchString(after) {
		t.Error("'Stop' is not restored right after gpuexec's status is read")
	}
	arr := regexp.MustCompile(`(?s)\$gpuArgs = @\((.*?)\n\)`).FindStringSubmatch(ps)
	if arr == nil {
		t.Fatal("no $gpuArgs = @( ... ) in render.ps1")
	}
	var flags []string
	for _, item := range regexp.MustCompile(`'[^']*'|\$\w+`).FindAllString(arr[1], -1) {
		if item == "'--'" {
			break
		}
		switch item {
		case "$Lock":
			item = "'lock'"
		case "$slug":
			item = "'nightly-2026-10-12'"
		}
		if strings.HasPrefix(item, "$") {
			t.Fatalf("render.ps1 passes %s, which this test does not know", item)
		}
		flags = append(flags, strings.Trim(item, "'"))
	}
	runExampleFlags(t, flags)
}
