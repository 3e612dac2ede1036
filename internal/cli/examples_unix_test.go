//go:build unix

package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// The caller examples (Python, Node) run against the real gpuexec: the
// job's end, a deferral through GPUEXEC_WAIT (neither hard-codes --wait),
// a failing job and Ctrl+C while waiting each give the status a shell
// would see.
func TestExampleWrappers(t *testing.T) {
	t.Parallel()
	for _, w := range []struct{ name, tool, script string }{
		{"python", "python3", "examples/python/render_with_gpuexec.py"},
		{"node", "node", "examples/node/render-with-gpuexec.mjs"},
	} {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			example(t, strings.TrimPrefix(w.script, "examples/"))
			tool := needTool(t, w.tool)
			start := func(lock string, env []string, job ...string) *proc {
				args := append([]string{repoFile(w.script), "ep12", "--", helperBin}, job...)
				env = append([]string{role("exit"), "GPUEXEC_BIN=" + gpuexecBin, "GPUEXEC_LOCK=" + lock}, env...)
				cmd := exec.Command(tool, args...)
				cmd.Env = testsupport.Env(env...)
				return startProc(t, cmd)
			}
			t.Run("done", func(t *testing.T) {
				t.Parallel()
				_, lock := lockIn(t)
				r := start(lock, nil, "0").wait(t)
				wantCode(t, r, 0)
				if !strings.Contains(r.stderr, "channels/ep12: done (gpuexec status 0)") {
					t.Errorf("stderr:\n%s", r.stderr)
				}
			})
			t.Run("gpuexec missing", func(t *testing.T) {
				t.Parallel()
				_, lock := lockIn(t)
				// GPUEXEC_BIN comes last: it wins over start's.
				r := start(lock, []string{"GPUEXEC_BIN=" + filepath.Join(t.TempDir(), "gpuexec")}, "0").wait(t)
				wantCode(t, r, 127)
				if !strings.Contains(r.stderr, "gpuexec itself was not found") || strings.Contains(r.stderr, "command not found") {
					t.Errorf("the example does not say gpuexec is missing (or blames the job's command):\n%s", r.stderr)
				}
			})
			t.Run("job fails", func(t *testing.T) {
				t.Parallel()
				_, lock := lockIn(t)
				wantCode(t, start(lock, nil, "3").wait(t), 3)
			})
			t.Run("deferred with GPUEXEC_WAIT=0", func(t *testing.T) {
				t.Parallel()
				_, lock := lockIn(t)
				startHolder(t, lock)
				r := start(lock, []string{"GPUEXEC_WAIT=0"}, "0").wait(t)
				wantCode(t, r, 75)
				if !strings.Contains(r.stderr, "marked DEFERRED") || strings.Contains(r.stderr, "job started") {
					t.Errorf("stderr:\n%s", r.stderr)
				}
			})
			t.Run("Ctrl+C while waiting", func(t *testing.T) {
				t.Parallel()
				_, lock := lockIn(t)
				startHolder(t, lock)
				p := start(lock, []string{"GPUEXEC_WAIT=1h"}, "0")
				testsupport.Await(t, long, "gpuexec to queue", func() bool { return strings.Contains(p.stderr(), "waiting for GPU lock") })
				if err := syscall.Kill(p.pid(), syscall.SIGINT); err != nil {
					t.Fatal(err)
				}
				r := p.wait(t)
				wantCode(t, r, 130)
				if !strings.Contains(r.stderr, "forwarding SIGINT") || strings.Contains(r.stderr, "job started") {
					t.Errorf("stderr:\n%s", r.stderr)
				}
			})
		})
	}
}

// replaceAll replaces each old with new in s, failing t if old is not
// there: the test must notice when the example changes under it.
func replaceAll(t *testing.T, s string, pairs ...string) string {
	t.Helper()
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("the example no longer holds %q", pairs[i])
		}
		s = strings.ReplaceAll(s, pairs[i], pairs[i+1])
	}
	return s
}

// writeScript writes an executable shell script.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// examples/cron/crontab: its line runs as cron runs it (sh -c, the
// crontab's variables, \% turned into %) with the paths moved to a
// temporary folder: a render that succeeds prints nothing (no mail), one
// deferred logs DEFERRED to the render log and syslog and prints nothing,
// one that fails prints the FAILED line that cron mails.
func TestExampleCron(t *testing.T) {
	t.Parallel()
	tab := example(t, "cron/crontab")
	var env []string
	var line string
	for _, l := range strings.Split(tab, "\n") {
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case regexp.MustCompile(`^[A-Z_]+=`).MatchString(l):
			env = append(env, l)
		case line == "":
			m := regexp.MustCompile(`^(\S+\s+){5}(.*)$`).FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("not a crontab line: %q", l)
			}
			line = m[2]
		default:
			t.Fatalf("a second job line: %q", l)
		}
	}
	if line == "" {
		t.Fatal("no job line")
	}
	for _, tc := range []struct {
		name     string
		held     bool
		render   int
		output   string // what cron would mail ("" none)
		logged   string // in the render log
		syslog   string // what logger was given
		gxLogged bool   // gpuexec's --log has the job's lines
	}{
		{name: "rendered", gxLogged: true},
		{name: "deferred", held: true, logged: "DEFERRED: GPU busy", syslog: "-t nightly-render deferred (gpuexec status 75)"},
		{name: "failed", render: 3, output: "nightly render FAILED with status 3, see ", gxLogged: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			_, lock := lockIn(t)
			bin := filepath.Join(dir, "bin")
			for _, d := range []string{bin, filepath.Join(dir, "log", "gpuexec"), filepath.Join(dir, "log", "render")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			writeScript(t, filepath.Join(bin, "render"), fmt.Sprintf("echo rendering; exit %d", tc.render))
			writeScript(t, filepath.Join(bin, "logger"), fmt.Sprintf(`echo "$*" >> %s/syslog`, dir))
			cmdline := replaceAll(t, line,
				"/usr/local/bin/gpuexec", gpuexecBin,
				"/opt/render/bin/render", filepath.Join(bin, "render"),
				"/var/log/", filepath.Join(dir, "log")+"/",
				`\%`, "%")
			if tc.held {
				startHolder(t, lock)
				// The line waits 150m: try once instead.
				cmdline = replaceAll(t, cmdline, "--wait 150m", "--wait 0")
			}
			var cronEnv []string
			for _, kv := range env {
				switch k, v, _ := strings.Cut(kv, "="); k {
				case "GPUEXEC_LOCK":
					kv = k + "=" + lock
				case "PATH":
					kv = k + "=" + bin + ":" + v
				}
				cronEnv = append(cronEnv, kv)
			}
			cmd := exec.Command("/bin/sh", "-c", cmdline)
			cmd.Env = append(testsupport.Env(), cronEnv...)
			out, err := cmd.CombinedOutput()
			if err != nil && tc.output == "" {
				t.Errorf("the line failed: %v", err)
			}
			if got := string(out); tc.output == "" && got != "" || !strings.Contains(got, tc.output) {
				t.Errorf("output (mailed by cron) %q, want %q", got, tc.output)
			}
			read := func(p string) string { b, _ := os.ReadFile(filepath.Join(dir, p)); return string(b) }
			if renderLog := read("log/render/nightly.log"); !strings.Contains(renderLog, tc.logged) || tc.held == strings.Contains(renderLog, "rendering") {
				t.Errorf("render log:\n%s", renderLog)
			}
			if got := read("syslog"); !strings.Contains(got, tc.syslog) || (tc.syslog == "") != (got == "") {
				t.Errorf("logger was given %q, want %q", got, tc.syslog)
			}
			if gl := read("log/gpuexec/nightly-render.log"); tc.gxLogged != strings.Contains(gl, "job exited") {
				t.Errorf("gpuexec's log:\n%s", gl)
			}
		})
	}
}

// examples/systemd: systemd-analyze verify accepts the unit and the timer
// (with the unit's programs moved to ones that exist here), the stop
// settings let gpuexec release the lock, 75 is retried, and gpuexec takes
// the ExecStart line's flags.
func TestExampleSystemd(t *testing.T) {
	t.Parallel()
	unit := example(t, "systemd/gpuexec-render.service")
	timer := example(t, "systemd/gpuexec-render.timer")
	analyze := needTool(t, "systemd-analyze")
	dir := t.TempDir()
	moved := replaceAll(t, unit, "/usr/local/bin/gpuexec", gpuexecBin, "/opt/render/bin/render", helperBin)
	for name, content := range map[string]string{"gpuexec-render.service": moved, "gpuexec-render.timer": timer} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(analyze, "verify", "--man=no", "--recursive-errors=no", "./gpuexec-render.service", "./gpuexec-render.timer")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	// The [Service] settings, continuation lines joined.
	keys := map[string]string{}
	for _, l := range strings.Split(strings.ReplaceAll(unit, "\\\n", " "), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			keys[k] = strings.TrimSpace(v)
		}
	}
	start := strings.Fields(keys["ExecStart"])
	if len(start) == 0 || start[0] != "/usr/local/bin/gpuexec" {
		t.Fatalf("ExecStart=%s", keys["ExecStart"])
	}
	var flags []string
	for i, a := range start[1:] {
		if a == "--" {
			flags = start[1 : i+1]
			break
		}
	}
	killAfter := ""
	for i, f := range flags {
		if f == "--kill-after" && i+1 < len(flags) {
			killAfter = flags[i+1]
		}
	}
	switch {
	case keys["KillMode"] != "mixed":
		t.Errorf("KillMode=%s: gpuexec must get SIGTERM alone and forward it", keys["KillMode"])
	case killAfter == "" || keys["TimeoutStopSec"] == "":
		t.Errorf("no --kill-after (%q) or TimeoutStopSec", killAfter)
	case mustDuration(t, keys["TimeoutStopSec"]) <= mustDuration(t, killAfter):
		t.Errorf("TimeoutStopSec=%s is not above --kill-after %s", keys["TimeoutStopSec"], killAfter)
	}
	if strings.Contains(" "+keys["SuccessExitStatus"]+" ", " 75 ") || strings.Contains(" "+keys["RestartPreventExitStatus"]+" ", " 75 ") {
		t.Error("75 (deferred) counts as success or is never retried")
	}
	if env := keys["Environment"]; !strings.HasPrefix(env, "GPUEXEC_LOCK=/") {
		t.Errorf("Environment=%s does not name the lock", env)
	}
	runExampleFlags(t, flags)
}

// mustDuration parses a systemd or Go duration of whole seconds or
// minutes ("90s", "30s", "2min").
func mustDuration(t *testing.T, s string) int {
	t.Helper()
	var n int
	var unit string
	if _, err := fmt.Sscanf(s, "%d%s", &n, &unit); err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	switch unit {
	case "s":
		return n
	case "m", "min":
		return 60 * n
	}
	t.Fatalf("duration %q: unit %q", s, unit)
	return 0
}

// examples/ci/smoke-render.yml: the step's script runs in bash -e as
// GitHub Actions runs it, gpuexec and python3 on PATH (python3 a stand-in
// for the render): rendered, deferred (the step stays green, with the
// warning, the summary naming the holder, outcome=deferred) and failed.
func TestExampleCI(t *testing.T) {
	t.Parallel()
	yml := example(t, "ci/smoke-render.yml")
	bash := needTool(t, "bash")
	// The "run: |" block of the render step: the lines indented deeper
	// than "run:".
	i := strings.Index(yml, "        run: |\n")
	if i < 0 {
		t.Fatal("no run: | block")
	}
	var script strings.Builder
	for _, l := range strings.Split(yml[i+len("        run: |\n"):], "\n") {
		if l != "" && !strings.HasPrefix(l, "          ") {
			break
		}
		script.WriteString(strings.TrimPrefix(l, "          ") + "\n")
	}
	if m := regexp.MustCompile(`(?m)^      GPUEXEC_LOCK: (\S+)$`).FindStringSubmatch(yml); m == nil || !strings.HasPrefix(m[1], "/") {
		t.Error("the job's env does not name the machine's lock (GPUEXEC_LOCK: /...)")
	}
	for _, tc := range []struct {
		name    string
		held    bool
		render  int
		code    int
		outputs string // in $GITHUB_OUTPUT
		stdout  string
		summary string
	}{
		{name: "rendered", outputs: "status=0\noutcome=rendered\n"},
		{name: "deferred", held: true, outputs: "status=75\noutcome=deferred\n", stdout: "::warning title=Smoke render skipped::", summary: "held by " + holderOwner + "/" + holderSlug},
		{name: "failed", render: 3, code: 1, outputs: "status=3\n", stdout: "::error title=Smoke render failed::gpuexec exit status 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			_, lock := lockIn(t)
			bin := filepath.Join(dir, "bin")
			if err := os.Mkdir(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(gpuexecBin, filepath.Join(bin, "gpuexec")); err != nil {
				t.Fatal(err)
			}
			writeScript(t, filepath.Join(bin, "python3"), fmt.Sprintf("exit %d", tc.render))
			body := script.String()
			if tc.held {
				startHolder(t, lock)
				body = replaceAll(t, body, "--wait 20m", "--wait 0") // the step waits 20m
			}
			cmd := exec.Command(bash, "--noprofile", "--norc", "-eo", "pipefail", "-c", body)
			cmd.Dir = dir
			cmd.Env = testsupport.Env("PATH="+bin+":"+os.Getenv("PATH"), "GPUEXEC_LOCK="+lock, "GITHUB_RUN_ID=42",
				"GITHUB_OUTPUT="+filepath.Join(dir, "output"), "GITHUB_STEP_SUMMARY="+filepath.Join(dir, "summary"))
			p := startProc(t, cmd)
			r := p.wait(t)
			wantCode(t, r, tc.code)
			read := func(name string) string { b, _ := os.ReadFile(filepath.Join(dir, name)); return string(b) }
			if got := read("output"); got != tc.outputs {
				t.Errorf("GITHUB_OUTPUT %q, want %q", got, tc.outputs)
			}
			if !strings.Contains(r.stdout, tc.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tc.stdout, r.stdout)
			}
			if got := read("summary"); !strings.Contains(got, tc.summary) {
				t.Errorf("step summary lacks %q:\n%s", tc.summary, got)
			}
		})
	}
}
