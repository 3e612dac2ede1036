//go:build unix

package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuexec/gpuexec/internal/metrics/metricstest"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// examples/prometheus: the crontab line (run as cron runs it, sh -c) and
// the service's ExecStart, with the lock and the textfile folder moved to
// temporary ones, write a file Prometheus reads that says the lock is
// held, printing nothing; systemd-analyze verify accepts the unit and the
// timer, which starts it every 15 s.
func TestExamplePrometheus(t *testing.T) {
	t.Parallel()
	tab := example(t, "prometheus/crontab")
	unit := example(t, "prometheus/gpuexec-metrics.service")
	timer := example(t, "prometheus/gpuexec-metrics.timer")
	const lockPath, textfiles, bin = "/var/lib/gpuexec/gpu.lock", "/var/lib/node_exporter/textfile_collector/", "/usr/local/bin/gpuexec"
	_, lock := lockIn(t)
	startHolder(t, lock)

	// check runs cmdline (sh -c) with the paths moved and reads the file
	// it wrote.
	check := func(t *testing.T, cmdline string, env []string) {
		t.Helper()
		dir := t.TempDir()
		cmd := exec.Command("/bin/sh", "-c", replaceAll(t, cmdline, bin, gpuexecBin, lockPath, lock, textfiles, dir+"/"))
		cmd.Env = append(testsupport.Env("GPUEXEC_NVIDIA_SMI="), env...)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("%s: %v\n%s", cmdline, err, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, "gpuexec.prom"))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := metricstest.Parse(t, string(b))
		if v := got[metricstest.Key("gpuexec_lock_held", "lock", lock, "device", "")]; v != 1 {
			t.Errorf("gpuexec_lock_held %v, want 1:\n%s", v, b)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Errorf("left in the textfile folder: %v", ents)
		}
	}

	t.Run("crontab", func(t *testing.T) {
		var env []string
		var line string
		for _, l := range strings.Split(tab, "\n") {
			switch {
			case l == "" || strings.HasPrefix(l, "#"):
			case regexp.MustCompile(`^[A-Z_]+=`).MatchString(l):
				if !strings.HasPrefix(l, "PATH=") {
					env = append(env, l)
				}
			case line == "":
				m := regexp.MustCompile(`^(\*\s+){5}(.*)$`).FindStringSubmatch(l)
				if m == nil {
					t.Fatalf("not a crontab line run every minute: %q", l)
				}
				line = m[2]
			default:
				t.Fatalf("a second job line: %q", l)
			}
		}
		check(t, line, env)
	})

	t.Run("systemd", func(t *testing.T) {
		var start string
		for _, l := range strings.Split(unit, "\n") {
			if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
				start = v
			}
		}
		if !strings.HasPrefix(start, bin+" metrics ") {
			t.Fatalf("ExecStart=%s", start)
		}
		check(t, start, nil)
		for _, want := range []string{"OnUnitActiveSec=15s", "AccuracySec=1s", "Unit=gpuexec-metrics.service"} {
			if !strings.Contains(timer, "\n"+want+"\n") {
				t.Errorf("the timer lacks %s", want)
			}
		}
		analyze := needTool(t, "systemd-analyze")
		dir := t.TempDir()
		for name, content := range map[string]string{"gpuexec-metrics.service": replaceAll(t, unit, bin, gpuexecBin), "gpuexec-metrics.timer": timer} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(analyze, "verify", "--man=no", "--recursive-errors=no", "./gpuexec-metrics.service", "./gpuexec-metrics.timer")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	})
}
