// Package reporttest makes journal records for the tests and the docs of
// gpuexec report: a Day of jobs of every outcome, a Week of many, and
// their journal lines.
package reporttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/gpuexec/gpuexec/internal/journal"
)

// Lock is the lock of the records made here.
const Lock = "/srv/gpu/gpu.lock"

// job is one record of a Day, times in minutes after the day's start;
// start < 0: never started.
type job struct {
	owner, slug        string
	devices            []string
	queued, start, end int
	outcome            journal.Outcome
	status             int
	signal             string
	vram, peak         int64
	share              bool
	unused             int // minutes; -1: not measured
}

// Day is a day of 14 jobs from start (its midnight, say), on two devices
// of Lock ("0" and "1") and the lock as a whole, by four owners, of every
// outcome: ok, failed, timeout, deferred, interrupted (while running, and
// while waiting), lost, overbudget (one of a --share pair), refused, a
// --vram job that waited, and one that held its card unused for 2h30m.
// DayRan of them held the lock (one bar each on a timeline).
func Day(start time.Time) []journal.Record {
	d := []job{
		{"alice", "render-a", []string{"0"}, 480, 480, 540, journal.OK, 0, "", 8000, 6100, false, 0},
		{"bob", "train", []string{"1"}, 490, 490, 610, journal.OK, 0, "", 0, 20500, false, 3},
		{"carol", "encode", []string{"0"}, 510, 540, 580, journal.OK, 0, "", 0, 3000, false, 0},
		{"alice", "render-b", []string{"0"}, 550, 580, 590, journal.Failed, 1, "", 8000, 7900, false, 0},
		{"bob", "eval", []string{"1"}, 600, 610, 670, journal.Timeout, 124, "", 0, 12000, false, 0},
		{"carol", "thumbs", nil, 585, -1, 735, journal.Deferred, 75, "", 0, 0, false, -1},
		{"alice", "upscale", []string{"0"}, 585, 590, 610, journal.Interrupted, 130, "SIGINT", 0, 5000, false, 0},
		{"bob", "sweep", []string{"1"}, 670, 670, 700, journal.Lost, 125, "", 0, 9000, false, 0},
		{"carol", "share-a", []string{"0"}, 780, 780, 900, journal.OK, 0, "", 4000, 3500, true, 0},
		{"alice", "share-b", []string{"0"}, 785, 785, 810, journal.OverBudget, 123, "", 4000, 5200, true, 0},
		{"bob", "notebook", []string{"1"}, 700, 700, 880, journal.OK, 0, "", 0, 900, false, 150},
		{"dave", "nightly", nil, 960, -1, 960, journal.Refused, 125, "", 0, 0, false, -1},
		{"alice", "late", nil, 1020, -1, 1025, journal.Interrupted, 143, "SIGTERM", 0, 0, false, -1},
		{"carol", "big-model", []string{"0"}, 840, 900, 1030, journal.OK, 0, "", 10000, 9300, false, 0},
	}
	out := make([]journal.Record, 0, len(d))
	for i, j := range d {
		at := func(m int) time.Time { return start.Add(time.Duration(m) * time.Minute).UTC() }
		r := journal.Record{V: journal.Version, Owner: j.owner, Slug: j.slug, Argv: []string{"./" + j.slug + ".sh", "--day"},
			User: j.owner, Host: "ws1", PID: 1000 + i, Lock: Lock, Devices: j.devices,
			Queued: at(j.queued), Ended: at(j.end), Outcome: j.outcome, Status: j.status, Signal: j.signal,
			VRAMMiB: j.vram, Share: j.share}
		if j.outcome == journal.Timeout {
			r.TimeoutMS = time.Hour.Milliseconds()
		}
		if j.start >= 0 {
			st := at(j.start)
			r.Started = &st
			r.WaitedMS = int64(j.start-j.queued) * 60000
			r.HeldMS = int64(j.end-j.start) * 60000
			p := j.peak
			r.PeakMiB = &p
		} else {
			r.WaitedMS = int64(j.end-j.queued) * 60000
		}
		if j.unused >= 0 && j.start >= 0 {
			u := int64(j.unused) * 60000
			r.UnusedMS = &u
			r.IdleWarned = j.unused >= 20
		}
		out = append(out, r)
	}
	return out
}

// DayRan is the number of jobs of Day that held the lock.
const DayRan = 11

// Ran is the number of records of rs that held the lock (Started set).
func Ran(rs []journal.Record) int {
	n := 0
	for _, r := range rs {
		if r.Started != nil {
			n++
		}
	}
	return n
}

// Week is n jobs over the 7 days from start, on four devices of Lock, by
// six owners, mostly ok; the same n and start give the same records.
func Week(start time.Time, n int) []journal.Record {
	rng := rand.New(rand.NewPCG(uint64(n), 27))
	owners := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	outcomes := []journal.Outcome{journal.OK, journal.OK, journal.OK, journal.OK, journal.OK, journal.OK, journal.OK, journal.OK,
		journal.Failed, journal.Timeout, journal.Deferred, journal.Interrupted}
	const devices = 4
	free := [devices]time.Time{}
	for i := range free {
		free[i] = start
	}
	per := 7 * 24 * time.Hour / time.Duration(max(1, n/devices+1))
	out := make([]journal.Record, 0, n)
	for i := range n {
		dev := i % devices
		owner := owners[rng.IntN(len(owners))]
		oc := outcomes[rng.IntN(len(outcomes))]
		queued := free[dev].Add(-time.Duration(rng.Int64N(int64(per / 3))))
		if queued.Before(start) {
			queued = start
		}
		started := free[dev]
		held := per*6/10 + time.Duration(rng.Int64N(int64(per*3/10)))
		ended := started.Add(held)
		r := journal.Record{V: journal.Version, Owner: owner, Slug: fmt.Sprintf("video-%04d", i), Argv: []string{"render", fmt.Sprint(i)},
			User: owner, Host: "ws1", PID: 10000 + i, Lock: Lock, Queued: queued.UTC(), Outcome: oc}
		switch oc {
		case journal.Deferred:
			r.Ended = started.UTC()
			r.WaitedMS = r.Ended.Sub(r.Queued).Milliseconds()
			r.Status = 75
		default:
			st := started.UTC()
			r.Started, r.Ended = &st, ended.UTC()
			r.Devices = []string{fmt.Sprint(dev)}
			r.WaitedMS = st.Sub(r.Queued).Milliseconds()
			r.HeldMS = held.Milliseconds()
			p := 1000 + rng.Int64N(20000)
			r.PeakMiB = &p
			u := rng.Int64N(r.HeldMS/2 + 1)
			r.UnusedMS = &u
			free[dev] = ended.Add(per / 10)
			switch oc {
			case journal.Failed:
				r.Status = 1
			case journal.Timeout:
				r.Status, r.TimeoutMS = 124, held.Milliseconds()
			case journal.Interrupted:
				r.Status, r.Signal = 130, "SIGINT"
			}
		}
		out = append(out, r)
	}
	return out
}

// Lines is rs as journal lines: one JSON object and a newline each.
func Lines(rs []journal.Record) []byte {
	var b bytes.Buffer
	for i := range rs {
		line, err := json.Marshal(&rs[i])
		if err != nil {
			panic(err) // a Record always marshals
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// HostileNames are owner and slug names another member of the group could
// write into the journal: HTML, script, terminal escapes, a bidirectional
// override, invalid UTF-8, a newline.
var HostileNames = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(2)>`,
	"</svg><iframe src=//evil>",
	"\x1b]0;pwned\x07\x1b[2J",
	"bad\xff\xfeutf8<b>",
	"\u202eevil",
	"line\nbreak<style>",
}

// Hostile is a journal of lines another member could write, from start
// (a midnight): valid records (of Day's) whose owner, slug, host, device
// and signal are each of HostileNames, one written with raw invalid UTF-8
// bytes; then lines that are no records: one over journal.MaxLine, binary,
// wrong types, an unknown outcome, another version, and a last line
// without its end. A reader keeps len(HostileNames)+1 records and sets
// aside HostileSetAside lines.
func Hostile(start time.Time) []byte {
	day := Day(start)
	var rs []journal.Record
	for i, n := range HostileNames {
		r := day[i%len(day)]
		r.PID = 90000 + i
		r.Owner, r.Slug, r.Host = n, n, n
		if len(r.Devices) > 0 {
			r.Devices = []string{n}
		}
		if r.Signal != "" {
			r.Signal = n
		}
		rs = append(rs, r)
	}
	var b bytes.Buffer
	b.Write(Lines(rs))
	// Raw bytes that are not UTF-8 inside a JSON string (Marshal would
	// have replaced them).
	raw := day[0]
	raw.PID = 90100
	raw.Owner = "RAWOWNER"
	line := Lines([]journal.Record{raw})
	b.Write(bytes.Replace(line, []byte("RAWOWNER"), []byte("raw\xff\xfe<u>"), 1))
	b.WriteString(`{"v":1,"owner":"` + strings.Repeat("A", journal.MaxLine+10) + "\"}\n")
	b.WriteString("\x00\x01\x02\xff\xfe binary \x00\n")
	b.WriteString(`{"v":1,"owner":42,"slug":["x"],"queued":"yesterday"}` + "\n")
	b.WriteString(`{"v":1,"owner":"<script>x</script>","outcome":"pwned"}` + "\n")
	b.WriteString(`{"v":2}` + "\n")
	b.WriteString(`{"v":1,"owner":"cut`)
	return b.Bytes()
}

// HostileSetAside is the number of lines of Hostile that are no records.
const HostileSetAside = 6
