package report_test

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/report"
)

// A member of the group can write records of 64 devices each (a few
// hundred bytes a line): Summarize must not keep a bar, a wait and their
// spans for every device of every record before it cuts the timeline to
// MaxBars. 100,000 such records (58 MB of journal) took 6 GB and 31 s.
func TestSummarizeMemoryOfManyDevicesIsBounded(t *testing.T) {
	const jobs = 10000
	devs := make([]string, 64)
	for i := range devs {
		devs[i] = strconv.Itoa(i)
	}
	end := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	rd := &journal.Read{}
	for i := range jobs {
		e := end.Add(-time.Duration(i) * 3 * time.Second)
		s := e.Add(-time.Second)
		rd.Records = append(rd.Records, journal.Record{V: journal.Version, Owner: "o", Slug: "s", Host: "h", PID: i, Lock: "/l",
			Devices: devs, Queued: s.Add(-time.Second), Started: &s, Ended: e, WaitedMS: 1000, HeldMS: 1000, Outcome: journal.OK})
	}
	rd.Finish()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := report.Summarize(rd, report.Options{Since: end.Add(-24 * time.Hour), Until: end.Add(time.Second), Now: end})
	runtime.ReadMemStats(&after)
	if s.Jobs != jobs || len(s.Rows) != len(devs) {
		t.Fatalf("%d jobs on %d rows, want %d on %d", s.Jobs, len(s.Rows), jobs, len(devs))
	}
	for _, r := range s.Rows {
		if r.BusyMS != jobs*1000 || r.IdleWhileWaitingMS != jobs*1000 {
			t.Fatalf("row %s: busy %d ms, idle while waiting %d ms, want %d each", r.Device, r.BusyMS, r.IdleWhileWaitingMS, jobs*1000)
		}
	}
	// Per job and device: a span held and one waited, of two times each,
	// the room to grow them and the bars: 400 bytes is generous (it was
	// over 2,000).
	const perPair = 400
	if got, most := after.TotalAlloc-before.TotalAlloc, uint64(jobs*len(devs)*perPair); got > most {
		t.Errorf("Summarize allocated %d MB for %d jobs of %d devices: want at most %d MB (%d bytes a job and device)",
			got>>20, jobs, len(devs), most>>20, perPair)
	}
}
