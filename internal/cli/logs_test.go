package cli

// Black-box tests of what gpuexec logs: every line attributed to its job
// (owner, slug, gpuexec's pid, devices), --log-format for stderr, the
// waiting line on its own schedule, and one --log file shared by several
// gpuexec processes.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuexec/gpuexec/internal/testsupport"
)

// jsonLines parses every line of s as a JSON object.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range lines(s) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// byMessage is the first line whose @message starts with msg.
func byMessage(ls []map[string]any, msg string) map[string]any {
	for _, m := range ls {
		if s, _ := m["@message"].(string); strings.HasPrefix(s, msg) {
			return m
		}
	}
	return nil
}

// Every line names the job (owner, slug, gpuexec's pid and the --gpus
// asked for), on stderr and in the --log file, in JSON (--log-format json)
// and in text; the acquired and started lines name the devices taken.
func TestLogLinesNameTheJob(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			_, lock := lockIn(t)
			logFile := filepath.Join(t.TempDir(), "logs", "gpuexec.log")
			p := startProc(t, gpuexecCmd([]string{role("exit")}, "--lock", lock, "--gpus", "0,1", "--owner", "channels", "--slug", "ep12",
				"--log", logFile, "--log-format", format, "--", helperBin, "0"))
			r := p.wait(t)
			wantCode(t, r, 0)
			file, err := os.ReadFile(logFile)
			if err != nil {
				t.Fatal(err)
			}
			pid := p.pid()
			for where, out := range map[string]string{"stderr": r.stderr, "--log file": string(file)} {
				if format == "text" {
					for _, l := range lines(out) {
						for _, f := range []string{"owner=channels", "slug=ep12", "gpuexec-pid=" + strconv.Itoa(pid), `gpus="0,1"`} {
							if !strings.Contains(l, f) {
								t.Errorf("%s: line lacks %s: %s", where, f, l)
							}
						}
					}
					continue
				}
				ls := jsonLines(t, out)
				for _, m := range ls {
					if m["owner"] != "channels" || m["slug"] != "ep12" || m["gpuexec-pid"] != float64(pid) || m["gpus"] != "0,1" {
						t.Errorf("%s: line does not name the job (owner, slug, gpuexec-pid %d, gpus): %v", where, pid, m)
					}
				}
				for _, msg := range []string{"acquired GPU lock", "job started"} {
					if m := byMessage(ls, msg); m == nil || m["devices"] != "0" {
						t.Errorf("%s: %q line does not name the device taken (devices=0): %v", where, msg, m)
					}
				}
				for _, msg := range []string{"job exited", "releasing GPU lock"} {
					if byMessage(ls, msg) == nil {
						t.Errorf("%s: no %q line:\n%s", where, msg, out)
					}
				}
			}
		})
	}
}

func TestLogFormatRefused(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	r := gx(t, []string{role("exit")}, "--lock", lock, "--log-format", "yaml", "--", helperBin, "0")
	wantCode(t, r, 125)
	if !strings.Contains(r.stderr, `--log-format must be text or json, got "yaml"`) {
		t.Errorf("stderr: %s", r.stderr)
	}
}

// --log-json makes the file JSON whatever --log-format says for stderr.
func TestLogJSONFileTextStderr(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	logFile := filepath.Join(t.TempDir(), "logs", "gpuexec.log")
	r := gx(t, []string{role("exit")}, "--lock", lock, "--log", logFile, "--log-json", "--", helperBin, "0")
	wantCode(t, r, 0)
	if !strings.Contains(r.stderr, "[INFO]  gpuexec.supervisor: job started:") {
		t.Errorf("stderr is not text:\n%s", r.stderr)
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if byMessage(jsonLines(t, string(b)), "job exited") == nil {
		t.Errorf("no job exited line in %s", b)
	}
}

// --report is not slowed to --poll: with the default poll of 20s and a
// report every 100ms, lines keep coming. Each says who holds the lock, for
// how long and until when (its --timeout), the position, the wait so far
// and the time left, in its message: in JSON too, no field repeats it.
func TestReportOnItsOwnSchedule(t *testing.T) {
	t.Parallel()
	_, lock := lockIn(t)
	h := startHolder(t, lock, "--timeout", "1h")
	holderName := fmt.Sprintf("%s/%s (pid %d)", holderOwner, holderSlug, h.p.pid())
	w := startProc(t, gpuexecCmd([]string{role("exit")}, "--lock", lock, "--report", "100ms", "--wait", "2h",
		"--log-format", "json", "--", helperBin, "0"))
	var waiting []map[string]any
	testsupport.Await(t, long, "four waiting lines", func() bool {
		waiting = waiting[:0]
		for _, l := range lines(w.stderr()) {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && strings.HasPrefix(fmt.Sprint(m["@message"]), "waiting for GPU lock") {
				waiting = append(waiting, m)
			}
		}
		return len(waiting) >= 4
	})
	h.release()
	wantCode(t, w.wait(t), 0)
	for _, m := range waiting {
		msg := fmt.Sprint(m["@message"])
		for _, part := range []string{"held by " + holderName + " for ", ", deadline ", " (in 1h)", "; position 1 of 1; waited ", ", defers in 2h"} {
			if !strings.Contains(msg, part) {
				t.Errorf("waiting line lacks %q: %s", part, msg)
			}
		}
		// The message says it all: the fields are the job's and the
		// lock's, none repeats the message.
		for k := range m {
			switch k {
			case "@level", "@message", "@module", "@timestamp", "owner", "slug", "gpuexec-pid", "path":
			default:
				t.Errorf("waiting line has a field %q that repeats its message: %v", k, m)
			}
		}
	}
}

// Several gpuexec processes naming one --log file, at once: every line of
// each is there, whole, and names its job.
func TestSharedLogFile(t *testing.T) {
	t.Parallel()
	const jobs = 6
	logFile := filepath.Join(t.TempDir(), "logs", "gpuexec.log")
	ps := make([]*proc, jobs)
	for i := range ps {
		_, lock := lockIn(t) // locks of their own: all run at once
		ps[i] = startProc(t, gpuexecCmd([]string{role("exit")}, "--lock", lock, "--owner", "cron", "--slug", fmt.Sprintf("job%d", i),
			"--log", logFile, "--log-format", "json", "--", helperBin, "0"))
	}
	for _, p := range ps {
		wantCode(t, p.wait(t), 0)
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, m := range jsonLines(t, string(b)) {
		seen[fmt.Sprintf("%v %v %v", m["slug"], m["gpuexec-pid"], m["@message"])]++
	}
	for i, p := range ps {
		for _, msg := range []string{"acquired GPU lock", "job started", "job exited", "releasing GPU lock"} {
			if k := fmt.Sprintf("job%d %d %s", i, p.pid(), msg); seen[k] != 1 {
				t.Errorf("%q logged %d times in the shared file", k, seen[k])
			}
		}
	}
}

// Jobs hand the lock on through one --log file: the first of each chain
// takes it without waiting (--wait 0), the next two queue. Each job's
// lines hold one "acquired GPU lock" and, after it, one "releasing GPU
// lock", and in the file's order each holder's releasing line comes before
// the acquired line of the holder after it: a handoff never reads as an
// overlap. The same for a lock, a GPU (--gpus) and a sharer (--share)
// handing on to a whole-card job.
func TestHandoffLogReadsInOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		jobs [3][]string
	}{
		{"lock", [3][]string{{"--wait", "0"}, nil, nil}},
		{"gpus", [3][]string{{"--gpus", "0", "--wait", "0"}, {"--gpus", "0"}, {"--gpus", "0"}}},
		{"share", [3][]string{{"--share", "--vram", "4G", "--wait", "0"}, nil, {"--share", "--vram", "4G"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, lock := lockIn(t)
			c := newCard(t, rtx4090(500))
			logFile := filepath.Join(t.TempDir(), "logs", "gpuexec.log")
			jobs := make([]*sharedJob, len(tc.jobs))
			for i, extra := range tc.jobs {
				dir := t.TempDir()
				j := &sharedJob{ready: filepath.Join(dir, "ready")}
				args := append([]string{"--lock", lock, "--log", logFile, "--log-format", "json", "--slug", fmt.Sprintf("job%d", i),
					"--wait", "2m", "--report", "1h"}, extra...)
				cmd := gpuexecCmd(c.env(role("sharehold"), readyEnv+"="+j.ready), append(args, "--", helperBin)...)
				var err error
				if j.stdin, err = cmd.StdinPipe(); err != nil {
					t.Fatal(err)
				}
				j.proc = startProc(t, cmd)
				jobs[i] = j
				if i == 0 {
					awaitStarted(t, j)
					continue
				}
				// Queued (its first waiting line is logged once its
				// ticket is in the queue), behind the one before.
				testsupport.Await(t, long, fmt.Sprintf("job%d waiting", i), func() bool {
					if j.exited() {
						t.Fatalf("job%d exited:\n%s", i, j.stderr())
					}
					return strings.Contains(j.stderr(), "waiting for")
				})
			}
			for _, j := range jobs {
				awaitStarted(t, j)
				wantCode(t, j.end(t), 0)
			}
			b, err := os.ReadFile(logFile)
			if err != nil {
				t.Fatal(err)
			}
			ls := jsonLines(t, string(b))
			// at is where each job's acquired and releasing lines are
			// in the file: -1 for none, -2 for more than one.
			at := func(j *sharedJob, msg string) int {
				n := -1
				for i, m := range ls {
					if m["gpuexec-pid"] == float64(j.pid()) && m["@message"] == msg {
						if n != -1 {
							return -2
						}
						n = i
					}
				}
				return n
			}
			for i, j := range jobs {
				acq, rel := at(j, "acquired GPU lock"), at(j, "releasing GPU lock")
				if acq < 0 || rel < 0 || rel < acq {
					t.Errorf("job%d: acquired line at %d, releasing line at %d (-1: none, -2: more than one); want one of each, in that order:\n%s", i, acq, rel, b)
				}
				if i == 0 {
					continue
				}
				if prev := at(jobs[i-1], "releasing GPU lock"); prev < 0 || prev > acq {
					t.Errorf("job%d's releasing line (at %d) is not before job%d's acquired line (at %d):\n%s", i-1, prev, i, acq, b)
				}
			}
		})
	}
}
