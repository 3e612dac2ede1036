package report_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpuexec/gpuexec/internal/escape"
	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/report"
)

// Two jobs of a morning: the second waited for the first, then failed.
// Names from a journal are another user's words: escape them to show them.
func ExampleSummarize() {
	lines := `{"v":1,"owner":"alice","slug":"render","argv":["render"],"user":"alice","host":"ws1","pid":10,"lock":"/srv/gpu/gpu.lock","devices":["0"],"queued":"2026-12-01T08:00:00Z","started":"2026-12-01T08:00:00Z","ended":"2026-12-01T09:00:00Z","waited_ms":0,"held_ms":3600000,"outcome":"ok","status":0}
{"v":1,"owner":"bob","slug":"train","argv":["train"],"user":"bob","host":"ws1","pid":11,"lock":"/srv/gpu/gpu.lock","devices":["0"],"queued":"2026-12-01T08:30:00Z","started":"2026-12-01T09:00:00Z","ended":"2026-12-01T09:10:00Z","waited_ms":1800000,"held_ms":600000,"outcome":"failed","status":1}
`
	rd := &journal.Read{}
	if err := rd.From(strings.NewReader(lines), journal.Window{}); err != nil {
		panic(err)
	}
	rd.Finish()
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	s := report.Summarize(rd, report.Options{Since: day, Until: day.Add(24 * time.Hour)})
	fmt.Println(s.Jobs, "jobs,", report.Hours(s.GPUHeldMS), "GPU-hours")
	for _, o := range s.Owners {
		fmt.Printf("%s: %d job(s), wait p90 %s\n", escape.Text(o.Name), o.Jobs, report.Duration(o.WaitP90MS))
	}
	for _, j := range s.NotRun {
		fmt.Printf("not ok: %s %s\n", report.JobName(j.Owner, j.Slug), report.Ended(j))
	}
	for _, r := range s.Rows {
		fmt.Printf("device %s: busy %s, idle while someone waited %s\n", escape.Text(r.Device), report.Duration(r.BusyMS), report.Duration(r.IdleWhileWaitingMS))
	}
	// Output:
	// 2 jobs, 1.17 GPU-hours
	// alice: 1 job(s), wait p90 0s
	// bob: 1 job(s), wait p90 30m00s
	// not ok: bob/train failed (status 1)
	// device 0: busy 1h10m, idle while someone waited 0s
}
