package lock

// Fuzz targets for reading and judging lock files: whatever bytes a lock
// file holds and whatever the processes it names are doing, parsing never
// panics, every file falls in exactly one class (a record, a record being
// written or damaged, not a lock at all), and judging keeps the rules of
// judge: never stale while the kernel, the job's group or a fresh heartbeat
// says alive, never held when everything says gone.
//
// The seed corpus is in testdata/fuzz/<target>/; CI runs each target for a
// short time:
//
//	go test -run='^$' -fuzz='^FuzzParseRecord$' -fuzztime=10s ./lock

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/proc"
)

// class is what readStatus makes of a file's content.
type class int

const (
	classRecord  class = iota // a valid record
	classPartial              // being written or damaged: held for writeGrace, then stale
	classNotLock              // not a lock: refused, never touched
)

// classify is the classification of content as readStatus reads it (at
// most maxRecordSize+1 bytes).
func classify(content []byte) class {
	if len(content) > maxRecordSize+1 {
		content = content[:maxRecordSize+1]
	}
	if _, err := parseRecord(content); err == nil {
		return classRecord
	}
	if partialRecord(content) {
		return classPartial
	}
	return classNotLock
}

func FuzzParseRecord(f *testing.F) {
	f.Add([]byte(`{"pid":4242,"acquiredAt":"2026-10-12T12:18:03.512Z","owner":"channels","slug":"ep12","token":"9f86d081884c7d65"}`))
	f.Fuzz(func(t *testing.T, content []byte) {
		info, err := parseRecord(content)
		partial := partialRecord(content)
		if err == nil {
			if info.PID <= 0 || info.PID > math.MaxInt32 {
				t.Fatalf("parsed pid %d cannot name a process", info.PID)
			}
			if info.Token == "" {
				t.Fatal("parsed a record without a token")
			}
			if info.ChildPGID < 0 || info.ChildPGID > math.MaxInt32 {
				t.Fatalf("parsed childPgid %d", info.ChildPGID)
			}
			// What gpuexec writes for it parses back to the same.
			again, err := parseRecord(info.encode())
			if err != nil || *again != *info {
				t.Fatalf("re-encoded record %s parses as %+v, %v; want %+v", info.encode(), again, err, info)
			}
			// A record is the very lock it was judged to be.
			if !sameRecord(&Status{Info: info, Content: content}, content) {
				t.Fatal("sameRecord says a record differs from itself")
			}
			return
		}
		if !errors.Is(err, errBadRecord) {
			t.Fatalf("parse error %v does not wrap errBadRecord", err)
		}
		trimmed := bytes.Trim(content, " \t\r\n\x00")
		switch {
		case len(content) > maxPartialRecord && partial:
			t.Fatalf("%d bytes taken for a record being written", len(content))
		case len(content) <= maxPartialRecord && len(trimmed) == 0 && !partial:
			t.Fatalf("blank content %q not taken for a record being written", content)
		case len(content) <= maxPartialRecord && len(trimmed) > 0 && trimmed[0] != '{' && partial:
			t.Fatalf("content %q that is no JSON object taken for a record being written", content)
		}
		// Content that did not parse is the same lock only as the same
		// bytes.
		judged := &Status{Content: content}
		if !sameRecord(judged, bytes.Clone(content)) {
			t.Fatal("sameRecord says content differs from itself")
		}
		if sameRecord(judged, append(bytes.Clone(content), 'x')) {
			t.Fatal("sameRecord says different content is the same")
		}
	})
}

// fuzzProber is a prober whose answers come from the fuzzer.
type fuzzProber struct {
	isAlive, startKnown, group, liveKnown, liveIsHeld, noted, notedSince bool
	start                                                                int64
}

func (p fuzzProber) alive(int) bool              { return p.isAlive }
func (p fuzzProber) startTime(int) (int64, bool) { return p.start, p.startKnown }
func (p fuzzProber) groupAlive(jobGroup) bool    { return p.group }
func (p fuzzProber) liveHeld(string) (held, known bool, group jobGroup) {
	return p.liveIsHeld, p.liveKnown, p.notedGroup()
}

// notedGroup is the group the prober's liveness file notes.
func (p fuzzProber) notedGroup() jobGroup {
	if !p.liveKnown || p.liveIsHeld || !p.noted {
		return jobGroup{}
	}
	if p.notedSince {
		return jobGroup{id: 300, since: 1_000}
	}
	return jobGroup{id: 300}
}

func FuzzJudge(f *testing.F) {
	f.Add([]byte(`{"pid":100,"token":"0123456789abcdef","pidStart":5000,"childPgid":200}`), int64(60_000), int64(5_400_000), uint8(0b00011), int64(5000), false)
	f.Fuzz(func(t *testing.T, content []byte, ageMs, staleMs int64, bits uint8, start int64, otherHost bool) {
		const limit = 1 << 50 // ms; keeps durations from overflowing
		if ageMs < -limit || ageMs > limit || staleMs <= 0 || staleMs > limit {
			t.Skip()
		}
		p := fuzzProber{
			isAlive:    bits&1 != 0,
			startKnown: bits&2 != 0,
			group:      bits&4 != 0,
			liveKnown:  bits&8 != 0,
			liveIsHeld: bits&16 != 0,
			noted:      bits&32 != 0,
			notedSince: bits&64 != 0,
			start:      start,
		}
		now := time.Date(2026, 10, 12, 20, 18, 0, 0, time.UTC)
		age := time.Duration(ageMs) * time.Millisecond
		staleAfter := time.Duration(staleMs) * time.Millisecond
		st := &Status{Content: content, ModTime: now.Add(-age)}
		st.Info, _ = parseRecord(content)
		if st.Info != nil && otherHost {
			st.Info.Host = "another-host-" + proc.HostName()
		}
		judge(st, now, staleAfter, p)

		if st.State != StateHeld && st.State != StateStale {
			t.Fatalf("state %q", st.State)
		}
		if st.Alive != (st.State == StateHeld) {
			t.Fatalf("alive %v for a %s lock", st.Alive, st.State)
		}
		if st.State == StateStale && st.Reason == "" {
			t.Fatal("stale without a reason")
		}
		if st.HeartbeatAge != age {
			t.Fatalf("heartbeat age %s, want %s", st.HeartbeatAge, age)
		}
		info := st.Info
		if info == nil {
			// Being written: a fresh mtime, a little in the future at
			// most (clock skew); far in the future is no excuse.
			if want := age < writeGrace && age > -writeGrace; st.Alive != want {
				t.Fatalf("content that is no record, %s old: alive %v, want %v", age, st.Alive, want)
			}
			return
		}
		foreign := !sameHost(info.Host)
		noHeartbeat := age > staleAfter
		if foreign || (p.liveKnown && p.liveIsHeld) {
			// Another host's record lives by its heartbeat alone; the
			// kernel's word (a held liveness lock, whatever host the
			// record names) outlives any heartbeat.
			if want := (p.liveKnown && p.liveIsHeld) || !noHeartbeat; st.Alive != want {
				t.Fatalf("heartbeat %s old (stale after %s), liveness %+v, other host %v: alive %v, want %v",
					age, staleAfter, p, foreign, st.Alive, want)
			}
			return
		}
		// On this host: a holder that is not gone is held...
		recycled := info.PIDStart != 0 && p.startKnown && !withinTolerance(p.start, info.PIDStart)
		gone := noHeartbeat || p.liveKnown || !p.isAlive || recycled
		// ... and a gone one's lock while its job's group runs, however
		// old the heartbeat when the group's start is known.
		g := jobGroup{id: info.ChildPGID, since: info.ChildStart}
		if g.id == 0 {
			g = p.notedGroup()
		}
		groupSign := g.id > 0 && (g.since > 0 || !noHeartbeat) && p.group
		if want := !gone || groupSign; want != st.Alive {
			t.Fatalf("judged %s (%s) with liveness %+v, record %+v, age %s (stale after %s): want alive %v",
				st.State, st.Reason, p, *info, age, staleAfter, want)
		}
	})
}

func FuzzReadStatus(f *testing.F) {
	f.Add([]byte(`{"pid":4242,"token":"9f86d081884c7d65"}`))
	f.Fuzz(func(t *testing.T, content []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "gpu.lock")
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := readStatus(path)
		want := classify(content)
		if err != nil {
			if want != classNotLock || !errors.Is(err, ErrNotLock) {
				t.Fatalf("readStatus: %v; content is class %d", err, want)
			}
			// Not a lock: nothing may remove it.
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			return
		}
		if want == classNotLock {
			t.Fatal("readStatus accepted content that is not a lock")
		}
		if (st.Info != nil) != (want == classRecord) || st.State != "" {
			t.Fatalf("readStatus: info %+v, state %q for class %d", st.Info, st.State, want)
		}
		if n := min(len(content), maxRecordSize+1); !bytes.Equal(st.Content, content[:n]) {
			t.Fatal("readStatus content differs from the file's")
		}

		// A lock replaced after it was judged is never removed, and
		// what replaced it is never lost...
		other := []byte(`{"pid":1,"token":"fuzzfuzzfuzzfuzz"}`)
		if st.Info != nil && st.Info.Token == "fuzzfuzzfuzzfuzz" {
			other = []byte(`{"pid":2,"token":"zzzzzzzzzzzzzzzz"}`)
		}
		if err := os.WriteFile(path, other, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := removeIfSame(path, st); !errors.Is(err, errChanged) {
			t.Fatalf("removing a lock that was replaced: %v, want errChanged", err)
		}
		if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, other) {
			t.Fatalf("the replacing lock is now %q, %v", b, err)
		}
		// ...and the very lock judged is removed, leaving nothing.
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := removeIfSame(path, st); err != nil {
			t.Fatalf("removing the lock judged: %v", err)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			t.Errorf("left behind: %s", e.Name())
		}
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the lock is still there: %v", err)
		}
	})
}
