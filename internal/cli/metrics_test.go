package cli

// Black-box tests of gpuexec metrics: what it prints of a held lock, its
// queue, the fake nvidia-smi's cards and a journal, read back with
// Prometheus' own parser; --textfile; what it does with what it cannot
// read. metrics_unix_test.go has the --textfile targets Windows cannot make.

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu/gputest"
	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/metrics"
	"github.com/gpuexec/gpuexec/internal/metrics/metricstest"
	"github.com/gpuexec/gpuexec/internal/testsupport"
)

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A held lock with a job queued behind it, two cards and a journal: every
// metric, every value, as Prometheus reads them.
func TestMetricsHeldQueued(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, lock := lockIn(t)
	c := newCard(t, frame([]gputest.GPU{gputest.RTX3080(0, gputest.UUID0, 1000), gputest.RTX4090(1, gputest.UUID1, 0)}))
	startHolder(t, lock)
	startProc(t, gpuexecCmd([]string{role("exit")}, "--lock", lock, "--owner", "w", "--wait", "1m", "--", helperBin, "0"))
	testsupport.Await(t, long, "the job to queue", func() bool { return queueLen(t, lock) == 1 })
	end := time.Now().UTC().Add(-time.Hour)
	jf := writeFile(t, filepath.Join(t.TempDir(), "j.journal"),
		journalLine(t, "ana", "s", journal.OK, 0, 2*time.Second, time.Minute, end)+
			journalLine(t, "ana", "s", journal.Failed, 3, 0, 30*time.Second, end)+
			journalLine(t, "bo", "s", journal.Deferred, 75, 10*time.Minute, 0, end)+
			"not json\n")

	r := gx(t, c.env(), "metrics", "--lock", lock, "--journal", jf)
	wantCode(t, r, 0)
	if r.stderr != "" {
		t.Errorf("stderr: %s", r.stderr)
	}
	got, help := metricstest.Parse(t, r.stdout)
	names := got.Names()
	elapsed := time.Since(start).Seconds() + 1
	one := []string{"lock", lock, "device", ""}
	k := metricstest.Key
	// The ages: between 0 and the test's time.
	for _, key := range []string{k("gpuexec_lock_held_seconds", one...), k("gpuexec_lock_heartbeat_age_seconds", one...),
		k("gpuexec_queue_oldest_wait_seconds", "lock", lock)} {
		v, ok := got[key]
		if !ok || v < 0 || v > elapsed {
			t.Errorf("%s = %v (given %v), want 0 to %v", key, v, ok, elapsed)
		}
		delete(got, key)
	}
	const mib = 1 << 20
	want := metricstest.Samples{
		k("gpuexec_lock_held", one...): 1, k("gpuexec_lock_stale", one...): 0,
		k("gpuexec_queue_length", "lock", lock):                                1,
		"gpuexec_gpus_readable":                                                1,
		k("gpuexec_gpu_memory_total_bytes", "gpu", "0", "uuid", gputest.UUID0): 10240 * mib,
		k("gpuexec_gpu_memory_used_bytes", "gpu", "0", "uuid", gputest.UUID0):  1000 * mib,
		k("gpuexec_gpu_memory_free_bytes", "gpu", "0", "uuid", gputest.UUID0):  (10240 - 240 - 1000) * mib,
		k("gpuexec_gpu_memory_total_bytes", "gpu", "1", "uuid", gputest.UUID1): 24564 * mib,
		k("gpuexec_gpu_memory_used_bytes", "gpu", "1", "uuid", gputest.UUID1):  0,
		k("gpuexec_gpu_memory_free_bytes", "gpu", "1", "uuid", gputest.UUID1):  (24564 - 342) * mib,
		"gpuexec_journal_readable":                                             1, "gpuexec_journal_files": 1, "gpuexec_journal_truncated": 0,
		k("gpuexec_journal_set_aside_lines", "reason", "not JSON"): 1,
		k("gpuexec_job_held_seconds_total", "owner", "ana"):        90,
		k("gpuexec_job_waited_seconds_total", "owner", "ana"):      2,
		k("gpuexec_job_held_seconds_total", "owner", "bo"):         0,
		k("gpuexec_job_waited_seconds_total", "owner", "bo"):       600,
	}
	for _, o := range journal.Outcomes {
		want[k("gpuexec_jobs_total", "owner", "ana", "outcome", string(o))] = 0
		want[k("gpuexec_jobs_total", "owner", "bo", "outcome", string(o))] = 0
	}
	want[k("gpuexec_jobs_total", "owner", "ana", "outcome", "ok")] = 1
	want[k("gpuexec_jobs_total", "owner", "ana", "outcome", "failed")] = 1
	want[k("gpuexec_jobs_total", "owner", "bo", "outcome", "deferred")] = 1
	for key, v := range want {
		if g, ok := got[key]; !ok || g != v {
			t.Errorf("%s = %v (given %v), want %v", key, g, ok, v)
		}
	}
	for key, v := range got {
		if _, ok := want[key]; !ok {
			t.Errorf("%s = %v, not wanted", key, v)
		}
	}
	for name, h := range help {
		if !strings.HasPrefix(name, "gpuexec_") || len(h) < 20 {
			t.Errorf("%s: help %q", name, h)
		}
	}

	// --textfile writes the same series into a file, at once: nothing
	// else is left in its folder.
	dir := t.TempDir()
	prom := filepath.Join(dir, "gpuexec.prom")
	for range 2 { // a new file, then one replaced
		r = gx(t, c.env(), "metrics", "--lock", lock, "--journal", jf, "--textfile", prom)
		wantCode(t, r, 0)
		if r.stdout != "" || r.stderr != "" {
			t.Errorf("--textfile printed %q, %q", r.stdout, r.stderr)
		}
	}
	b, err := os.ReadFile(prom)
	if err != nil {
		t.Fatal(err)
	}
	inFile, _ := metricstest.Parse(t, string(b))
	if a := inFile.Names(); !slices.Equal(a, names) {
		t.Errorf("--textfile's metrics %v, stdout's %v", a, names)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left in the folder: %v", ents)
	}
}

// What cannot be read (the journal, nvidia-smi) is one warning each and
// its *_readable 0; the rest still comes out, with status 0.
func TestMetricsUnreadable(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := newCard(t, gputest.Fixture{Exit: 9, Stdout: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."})
	r := gx(t, c.env(), "metrics", "--lock", lock, "--journal", t.TempDir())
	wantCode(t, r, 0)
	if n := len(lines(r.stderr)); n != 2 || !strings.Contains(r.stderr, "warning: GPUs unknown") || !strings.Contains(r.stderr, "warning: journal unreadable") {
		t.Errorf("stderr, %d lines:\n%s", n, r.stderr)
	}
	got, _ := metricstest.Parse(t, r.stdout)
	for key, v := range map[string]float64{"gpuexec_gpus_readable": 0, "gpuexec_journal_readable": 0,
		metricstest.Key("gpuexec_lock_held", "lock", lock, "device", ""): 0} {
		if g, ok := got[key]; !ok || g != v {
			t.Errorf("%s = %v (given %v), want %v", key, g, ok, v)
		}
	}
	if _, ok := got["gpuexec_journal_files"]; ok {
		t.Error("an unreadable journal has files")
	}

	// A journal not yet written is an empty one; no nvidia-smi at all
	// is no warning.
	r = gx(t, []string{"GPUEXEC_NVIDIA_SMI="}, "metrics", "--lock", lock)
	wantCode(t, r, 0)
	if r.stderr != "" {
		t.Errorf("stderr: %s", r.stderr)
	}
	got, _ = metricstest.Parse(t, r.stdout)
	if got["gpuexec_journal_readable"] != 1 || got["gpuexec_journal_files"] != 0 || got["gpuexec_gpus_readable"] != 0 {
		t.Errorf("metrics:\n%s", r.stdout)
	}
}

// A hostile journal (HTML, newlines, quotes, escapes and invalid UTF-8 in
// its owners, lines that are no records) gives metrics that parse, each
// owner under its label.
func TestMetricsHostileJournal(t *testing.T) {
	t.Parallel()
	dir, lock := lockIn(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	end := time.Now().UTC()
	owners := []string{"<script>alert(1)</script>", "a\nb", `q"uo\te`, "\x1b]0;pwned\x07", "rtl\u202e", strings.Repeat("é", 200), "# TYPE x counter"}
	var j strings.Builder
	for i, o := range owners {
		// Each its own job: records of one host, pid and queued time
		// are one job read twice.
		j.WriteString(journalLine(t, o, "s", journal.OK, 0, time.Second, time.Second, end.Add(time.Duration(-i)*time.Minute)))
	}
	// Invalid UTF-8, written raw into the JSON string.
	j.WriteString(strings.Replace(journalLine(t, "BAD", "s", journal.OK, 0, time.Second, time.Second, end.Add(-time.Hour)), "BAD", "\xff\xfe<b>", 1))
	j.WriteString("\x00\x01binary\n{\"v\":1,\"owner\":[]}\n" + strings.Repeat("x", journal.MaxLine+10) + "\n")
	jf := writeFile(t, filepath.Join(t.TempDir(), "j.journal"), j.String())
	r := gx(t, []string{"GPUEXEC_NVIDIA_SMI="}, "metrics", "--lock", lock, "--journal", jf)
	wantCode(t, r, 0)
	got, _ := metricstest.Parse(t, r.stdout)
	for _, o := range append(owners, "\ufffd\ufffd<b>") {
		if v := got[metricstest.Key("gpuexec_jobs_total", "owner", metrics.Label(o), "outcome", "ok")]; v != 1 {
			t.Errorf("owner %q: %v ok jobs, want 1", o, v)
		}
	}
	for reason, n := range map[string]float64{"not JSON": 2, "too long": 1} {
		if v := got[metricstest.Key("gpuexec_journal_set_aside_lines", "reason", reason)]; v != n {
			t.Errorf("%s: %v lines set aside, want %v\n%s", reason, v, n, r.stdout)
		}
	}
	for _, l := range lines(r.stdout) {
		if strings.ContainsAny(l, "\x00\x1b\x07\u202e") {
			t.Errorf("a line with a control character: %q", l)
		}
	}
}

// --textfile takes a regular file or a new one: a folder is refused with
// one line and status 125, and what is there is left.
func TestMetricsTextfileFolder(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	dir := t.TempDir()
	r := gx(t, nil, "metrics", "--lock", lock, "--textfile", dir)
	wantCode(t, r, 125)
	if len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, "is a folder") {
		t.Errorf("stderr:\n%s", r.stderr)
	}
	r = gx(t, nil, "metrics", "--lock", lock, "--textfile", filepath.Join(dir, "no", "such", "gpuexec.prom"))
	wantCode(t, r, 125)
	if len(lines(r.stderr)) != 1 {
		t.Errorf("stderr:\n%s", r.stderr)
	}
}
