package etcdhelper

import (
	"fmt"
	"time"

	"github.com/gpuexec/gpuexec/lock"
)

// The protocol's own types for what package lock returns: the helper sends
// a lock's record, status and report in these, never in lock's types, so
// that a field renamed or added there changes nothing on the wire until it
// is added here (and Protocol raised if older peers would misread it).
// Their JSON is the JSON of lock's types when protocol 3 was set down;
// testdata/protocol pins it.

// wireInfo is a lock.Info on the wire.
type wireInfo struct {
	PID        int    `json:"pid"`
	AcquiredAt string `json:"acquiredAt"`
	Owner      string `json:"owner"`
	Slug       string `json:"slug"`
	Token      string `json:"token"`
	Host       string `json:"host,omitempty"`
	PIDStart   int64  `json:"pidStart,omitempty"`
	ChildPGID  int    `json:"childPgid,omitempty"`
	ChildStart int64  `json:"childStart,omitempty"`
	Share      bool   `json:"share,omitempty"`
	Cover      bool   `json:"cover,omitempty"`
	Deadline   string `json:"deadline,omitempty"`
}

// wireSharer is a lock.Sharer on the wire.
type wireSharer struct {
	PID          int    `json:"pid"`
	Owner        string `json:"owner"`
	Slug         string `json:"slug"`
	Host         string `json:"host,omitempty"`
	PIDStart     int64  `json:"pidStart,omitempty"`
	ChildPGID    int    `json:"childPgid,omitempty"`
	ChildStart   int64  `json:"childStart,omitempty"`
	Gone         bool   `json:"gone,omitempty"`
	MiB          int64  `json:"vramMiB"`
	Since        string `json:"since"`
	UsedMiB      int64  `json:"usedMiB,omitempty"`
	Over         bool   `json:"over,omitempty"`
	Lock         string `json:"lock,omitempty"`
	Deadline     string `json:"deadline,omitempty"`
	Unattributed string `json:"unattributed,omitempty"`
	// Unopened was added after protocol 3 was set down, as were
	// wireStatus's Orphan and OrphanGroup and wireReport's Beside: an
	// etcd lock has none, so they are never on the wire, and a peer
	// that does not know them loses nothing.
	Unopened bool `json:"unopened,omitempty"`
}

// wireStatus is a lock.Status on the wire.
type wireStatus struct {
	State         string         `json:"state"`
	Path          string         `json:"path"`
	Device        string         `json:"device,omitempty"`
	Info          *wireInfo      `json:"info,omitempty"`
	Fields        map[string]any `json:"fields,omitempty"`
	Content       []byte         `json:"content,omitempty"`
	ModTime       time.Time      `json:"modTime"`
	HeartbeatAge  time.Duration  `json:"heartbeatAge"`
	Alive         bool           `json:"alive"`
	Reason        string         `json:"reason,omitempty"`
	Sharers       []wireSharer   `json:"sharers,omitempty"`
	HolderProcess string         `json:"holderProcess,omitempty"`
	JobGroup      int            `json:"jobGroup,omitempty"`
	JobProcess    string         `json:"jobProcess,omitempty"`
	JobGroupDoubt string         `json:"jobGroupDoubt,omitempty"`
	Orphan        string         `json:"orphan,omitempty"`
	OrphanGroup   int            `json:"orphanGroup,omitempty"`
}

// wireWaiter is a lock.Waiter on the wire.
type wireWaiter struct {
	Position int      `json:"position"`
	Seq      uint64   `json:"seq"`
	PID      int      `json:"pid"`
	Owner    string   `json:"owner"`
	Slug     string   `json:"slug"`
	Host     string   `json:"host,omitempty"`
	Since    string   `json:"since"`
	Locks    []string `json:"locks,omitempty"`
	Alive    bool     `json:"alive"`
	Process  string   `json:"process,omitempty"`
}

// wireReport is a lock.Report on the wire.
type wireReport struct {
	Path   string        `json:"path"`
	Locks  []*wireStatus `json:"locks"`
	Queue  []wireWaiter  `json:"queue"`
	Beside []*wireStatus `json:"beside,omitempty"`
}

func toWireInfo(i *lock.Info) *wireInfo {
	if i == nil {
		return nil
	}
	return &wireInfo{PID: i.PID, AcquiredAt: i.AcquiredAt, Owner: i.Owner, Slug: i.Slug, Token: i.Token,
		Host: i.Host, PIDStart: i.PIDStart, ChildPGID: i.ChildPGID, ChildStart: i.ChildStart,
		Share: i.Share, Cover: i.Cover, Deadline: i.Deadline}
}

func (w *wireInfo) lock() *lock.Info {
	if w == nil {
		return nil
	}
	return &lock.Info{PID: w.PID, AcquiredAt: w.AcquiredAt, Owner: w.Owner, Slug: w.Slug, Token: w.Token,
		Host: w.Host, PIDStart: w.PIDStart, ChildPGID: w.ChildPGID, ChildStart: w.ChildStart,
		Share: w.Share, Cover: w.Cover, Deadline: w.Deadline}
}

func toWireSharer(s lock.Sharer) wireSharer {
	return wireSharer{PID: s.PID, Owner: s.Owner, Slug: s.Slug, Host: s.Host, PIDStart: s.PIDStart,
		ChildPGID: s.ChildPGID, ChildStart: s.ChildStart, Gone: s.Gone, MiB: s.MiB, Since: s.Since,
		UsedMiB: s.UsedMiB, Over: s.Over, Lock: s.Lock, Deadline: s.Deadline, Unattributed: s.Unattributed, Unopened: s.Unopened}
}

func (w wireSharer) lock() lock.Sharer {
	return lock.Sharer{PID: w.PID, Owner: w.Owner, Slug: w.Slug, Host: w.Host, PIDStart: w.PIDStart,
		ChildPGID: w.ChildPGID, ChildStart: w.ChildStart, Gone: w.Gone, MiB: w.MiB, Since: w.Since,
		UsedMiB: w.UsedMiB, Over: w.Over, Lock: w.Lock, Deadline: w.Deadline, Unattributed: w.Unattributed, Unopened: w.Unopened}
}

func toWireStatus(s *lock.Status) *wireStatus {
	if s == nil {
		return nil
	}
	return &wireStatus{State: string(s.State), Path: s.Path, Device: s.Device, Info: toWireInfo(s.Info),
		Fields: s.Fields, Content: s.Content, ModTime: s.ModTime, HeartbeatAge: s.HeartbeatAge,
		Alive: s.Alive, Reason: s.Reason, Sharers: mapSlice(s.Sharers, toWireSharer),
		HolderProcess: string(s.HolderProcess), JobGroup: s.JobGroup, JobProcess: string(s.JobProcess),
		JobGroupDoubt: toWireDoubt(s.JobGroupDoubt, s.JobGroup), Orphan: s.Orphan, OrphanGroup: s.OrphanGroup}
}

func (w *wireStatus) lock() *lock.Status {
	if w == nil {
		return nil
	}
	return &lock.Status{State: lock.State(w.State), Path: w.Path, Device: w.Device, Info: w.Info.lock(),
		Fields: w.Fields, Content: w.Content, ModTime: w.ModTime, HeartbeatAge: w.HeartbeatAge,
		Alive: w.Alive, Reason: w.Reason, Sharers: mapSlice(w.Sharers, wireSharer.lock),
		HolderProcess: lock.ProcState(w.HolderProcess), JobGroup: w.JobGroup,
		JobProcess: lock.ProcState(w.JobProcess), JobGroupDoubt: lockDoubt(w.JobGroupDoubt),
		Orphan: w.Orphan, OrphanGroup: w.OrphanGroup}
}

// wireDoubt is how protocol 3 carries a lock.ForeignGroup: the sentence
// lock.Status.JobGroupDoubt was then, which names the record's uid, the
// job's group and the group's uid.
const wireDoubt = "its record is uid %d's but names process group %d, which runs as uid %d"

func toWireDoubt(d *lock.ForeignGroup, group int) string {
	if d == nil {
		return ""
	}
	return fmt.Sprintf(wireDoubt, d.RecordUID, group, d.GroupUID)
}

// lockDoubt reads a doubt off the wire; one in another form is still a
// doubt, its uids untold (-1).
func lockDoubt(s string) *lock.ForeignGroup {
	if s == "" {
		return nil
	}
	var record, group, uid int
	if n, err := fmt.Sscanf(s, wireDoubt, &record, &group, &uid); n != 3 || err != nil {
		return &lock.ForeignGroup{RecordUID: -1, GroupUID: -1}
	}
	return &lock.ForeignGroup{RecordUID: record, GroupUID: uid}
}

func toWireStatuses(s []*lock.Status) []*wireStatus { return mapSlice(s, toWireStatus) }

func lockStatuses(w []*wireStatus) []*lock.Status { return mapSlice(w, (*wireStatus).lock) }

func toWireWaiter(w lock.Waiter) wireWaiter {
	return wireWaiter{Position: w.Position, Seq: w.Seq, PID: w.PID, Owner: w.Owner, Slug: w.Slug,
		Host: w.Host, Since: w.Since, Locks: w.Locks, Alive: w.Alive, Process: string(w.Process)}
}

func (w wireWaiter) lock() lock.Waiter {
	return lock.Waiter{Position: w.Position, Seq: w.Seq, PID: w.PID, Owner: w.Owner, Slug: w.Slug,
		Host: w.Host, Since: w.Since, Locks: w.Locks, Alive: w.Alive, Process: lock.ProcState(w.Process)}
}

func toWireReport(r *lock.Report) *wireReport {
	if r == nil {
		return nil
	}
	return &wireReport{Path: r.Path, Locks: toWireStatuses(r.Locks), Queue: mapSlice(r.Queue, toWireWaiter),
		Beside: toWireStatuses(r.Beside)}
}

func (w *wireReport) lock() *lock.Report {
	if w == nil {
		return nil
	}
	return &lock.Report{Path: w.Path, Locks: lockStatuses(w.Locks), Queue: mapSlice(w.Queue, wireWaiter.lock),
		Beside: lockStatuses(w.Beside)}
}

// mapSlice is f of each of in; nil for nil (which JSON tells from empty).
func mapSlice[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}
