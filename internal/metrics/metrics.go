// Package metrics makes one reading of gpuexec's state (a Snapshot: the
// lock and its queue, the GPUs, the journal) into Prometheus metrics, for
// node_exporter's textfile collector (`gpuexec metrics`).
//
// The metrics are constants made from the snapshot (Families), written in
// Prometheus' text format by WriteText, gpuexec's own encoder: nothing is
// kept between two readings, and nothing of the process that reads them
// (Go's runtime, its file descriptors) is among them. The package links no
// Prometheus module, which would go into the one gpuexec binary that every
// job runs through (the tests check WriteText byte for byte against
// client_golang's encoder). Every string that another user wrote (a job's
// owner, a GPU's UUID as nvidia-smi printed it) becomes a label value
// through Label, and the owners of the journal are at most MaxOwners, so
// that a hostile journal can neither make the output unreadable nor blow
// up the number of series.
package metrics

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpuexec/gpuexec/internal/escape"
	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/lock"
)

// Bounds of the labels: a label value is at most MaxLabel bytes; the
// journal's owners beyond the MaxOwners with the most jobs are counted
// together under the owner Other.
const (
	MaxLabel  = 128
	MaxOwners = 100
	Other     = "other"
)

// Snapshot is what the metrics are made of, read once.
type Snapshot struct {
	// At is when it was read: ages and waits are measured up to it.
	At time.Time
	// Report is the lock and its queue as read (lock.Backend.Inspect);
	// nil for none (no lock metrics).
	Report *lock.Report
	// Cards are the GPUs nvidia-smi listed, when CardsRead; CardsRead
	// false says that they could not be read (no nvidia-smi, or one that
	// failed): gpuexec_gpus_readable is 0 and no card has metrics.
	Cards     []gpu.Card
	CardsRead bool
	// Journal is what was read of the journals; nil with JournalFailed
	// false when there is no journal to read (no journal metrics at all).
	// JournalFailed says that the journals could not be read:
	// gpuexec_journal_readable is 0 and no other journal metric is made.
	Journal       *journal.Read
	JournalFailed bool
}

// Label is s made a label value that shows what another user wrote and
// nothing more: escaped as escape.Text escapes it (valid UTF-8, no control
// character or newline left), then cut to at most MaxLabel bytes at a rune
// boundary. Two strings may give one label.
func Label(s string) string {
	s = escape.Text(s)
	if len(s) <= MaxLabel {
		return s
	}
	n := MaxLabel
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// A desc is a metric's description: name, help, label names, type.
type desc struct {
	name, help string
	labels     []string
	typ        Type
}

// The metrics' descriptions.
var (
	lockHeld = &desc{"gpuexec_lock_held",
		"1 when the lock is held by a live holder, else 0 (free or stale).", []string{"lock", "device"}, Gauge}
	lockStale = &desc{"gpuexec_lock_stale",
		"1 when the lock file is stale (its holder is gone or its heartbeat stopped: gpuexec clear removes it), else 0.", []string{"lock", "device"}, Gauge}
	lockHeldSeconds = &desc{"gpuexec_lock_held_seconds",
		"How long the live holder has held the lock, from its record's acquiredAt; only for a held lock whose record says when.", []string{"lock", "device"}, Gauge}
	lockHeartbeat = &desc{"gpuexec_lock_heartbeat_age_seconds",
		"How long ago the lock file's heartbeat (its mtime) was, for a lock that is not free; negative for an mtime in the future.", []string{"lock", "device"}, Gauge}
	queueLength = &desc{"gpuexec_queue_length",
		"How many live jobs wait in the lock's queue.", []string{"lock"}, Gauge}
	queueOldest = &desc{"gpuexec_queue_oldest_wait_seconds",
		"How long the live job that has waited longest in the lock's queue has waited; 0 when none waits.", []string{"lock"}, Gauge}
	gpuTotal = &desc{"gpuexec_gpu_memory_total_bytes",
		"The GPU's video memory, as nvidia-smi reports it; left out when it does not say.", []string{"gpu", "uuid"}, Gauge}
	gpuUsed = &desc{"gpuexec_gpu_memory_used_bytes",
		"The GPU's video memory in use, as nvidia-smi reports it; left out when it does not say.", []string{"gpu", "uuid"}, Gauge}
	gpuFree = &desc{"gpuexec_gpu_memory_free_bytes",
		"The GPU's free video memory, as nvidia-smi reports it; left out when it does not say.", []string{"gpu", "uuid"}, Gauge}
	gpusReadable = &desc{"gpuexec_gpus_readable",
		"1 when nvidia-smi listed the GPUs (none, perhaps), 0 when there is no nvidia-smi or it failed (then no GPU has metrics).", nil, Gauge}
	jobsTotal = &desc{"gpuexec_jobs_total",
		"Jobs the journal records, by owner (--owner) and outcome; every outcome of an owner seen is listed, 0 included.", []string{"owner", "outcome"}, Counter}
	heldTotal = &desc{"gpuexec_job_held_seconds_total",
		"Seconds the journal's jobs held the lock, by owner.", []string{"owner"}, Counter}
	waitedTotal = &desc{"gpuexec_job_waited_seconds_total",
		"Seconds the journal's jobs waited for the lock, by owner.", []string{"owner"}, Counter}
	journalReadable = &desc{"gpuexec_journal_readable",
		"1 when the journals could be read (one not yet written counts as read, empty), 0 when not (then no other journal metric is given).", nil, Gauge}
	journalFiles = &desc{"gpuexec_journal_files",
		"How many journal files were read, rotated ones included.", nil, Gauge}
	journalSetAside = &desc{"gpuexec_journal_set_aside_lines",
		"Lines of the journals that are not valid records and were not counted, by reason.", []string{"reason"}, Gauge}
	journalTruncated = &desc{"gpuexec_journal_truncated",
		"1 when a bound of the journal reader (bytes of a file, records in all) stopped the read: the job counters leave jobs out; else 0.", nil, Gauge}
)

// set gathers the metrics, family by family in the order of their first
// sample, keeping the first of any sample that has the name and label
// values of one already there (two locks, cards or reasons that Label
// made alike), which the format does not allow.
type set struct {
	fams []Family
	by   map[*desc]int
	seen map[string]bool
}

func (s *set) add(d *desc, v float64, labels ...string) {
	k := d.name + "\x00" + strings.Join(labels, "\x00")
	if s.seen[k] {
		return
	}
	s.seen[k] = true
	i, ok := s.by[d]
	if !ok {
		i = len(s.fams)
		s.by[d] = i
		s.fams = append(s.fams, Family{Name: d.name, Help: d.help, Type: d.typ, LabelNames: d.labels})
	}
	s.fams[i].Samples = append(s.fams[i].Samples, Sample{LabelValues: labels, Value: v})
}

func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Families are the metrics of s, for WriteText.
func Families(s Snapshot) []Family {
	ms := &set{by: map[*desc]int{}, seen: map[string]bool{}}
	if s.Report != nil {
		lockMetrics(ms, s.At, s.Report)
	}
	ms.add(gpusReadable, bit(s.CardsRead))
	if s.CardsRead {
		for _, c := range s.Cards {
			gpuMetrics(ms, c)
		}
	}
	if s.Journal != nil || s.JournalFailed {
		ms.add(journalReadable, bit(!s.JournalFailed))
	}
	if s.Journal != nil && !s.JournalFailed {
		journalMetrics(ms, s.Journal)
	}
	return ms.fams
}

func lockMetrics(ms *set, at time.Time, r *lock.Report) {
	for _, st := range append(slices.Clip(r.Locks), r.Beside...) {
		l := []string{escape.Text(st.Path), escape.Text(st.Device)}
		ms.add(lockHeld, bit(st.State == lock.StateHeld), l...)
		ms.add(lockStale, bit(st.State == lock.StateStale), l...)
		if st.State == lock.StateHeld && st.Info != nil {
			if t := st.Info.Acquired(); !t.IsZero() {
				ms.add(lockHeldSeconds, max(at.Sub(t).Seconds(), 0), l...)
			}
		}
		if st.State != lock.StateFree && !st.ModTime.IsZero() {
			ms.add(lockHeartbeat, st.HeartbeatAge.Seconds(), l...)
		}
	}
	n, oldest := 0, 0.0
	for _, w := range r.Queue {
		if !w.Alive {
			continue
		}
		n++
		if t, err := time.Parse(time.RFC3339Nano, w.Since); err == nil {
			oldest = max(oldest, at.Sub(t).Seconds())
		}
	}
	path := escape.Text(r.Path)
	ms.add(queueLength, float64(n), path)
	ms.add(queueOldest, oldest, path)
}

func gpuMetrics(ms *set, c gpu.Card) {
	l := []string{strconv.Itoa(c.Index), Label(c.UUID)}
	for _, m := range []struct {
		d   *desc
		mib gpu.MiB
	}{{gpuTotal, c.Memory.Total}, {gpuUsed, c.Memory.Used}, {gpuFree, c.Memory.Free}} {
		if m.mib.Known() {
			ms.add(m.d, float64(m.mib)*(1<<20), l...)
		}
	}
}

// owner is what the journal says of one owner's jobs.
type owner struct {
	name         string
	jobs         map[journal.Outcome]int
	n            int
	held, waited int64 // ms
}

func (o *owner) merge(p *owner) {
	for k, v := range p.jobs {
		o.jobs[k] += v
	}
	o.n += p.n
	o.held += p.held
	o.waited += p.waited
}

// owners are the journal's owners by label, at most MaxOwners of them and
// Other: those with the most jobs (then by label) are kept.
func owners(recs []journal.Record) []*owner {
	by := map[string]*owner{}
	for _, r := range recs {
		name := Label(r.Owner)
		o := by[name]
		if o == nil {
			o = &owner{name: name, jobs: map[journal.Outcome]int{}}
			by[name] = o
		}
		o.jobs[r.Outcome]++
		o.n++
		o.held += r.HeldMS
		o.waited += r.WaitedMS
	}
	all := make([]*owner, 0, len(by))
	for _, o := range by {
		all = append(all, o)
	}
	slices.SortFunc(all, func(a, b *owner) int {
		return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.name, b.name))
	})
	if len(all) <= MaxOwners {
		return all
	}
	kept := all[:MaxOwners]
	other := &owner{name: Other, jobs: map[journal.Outcome]int{}}
	for _, o := range all[MaxOwners:] {
		other.merge(o)
	}
	// An owner whose name is Other is counted with the rest.
	if i := slices.IndexFunc(kept, func(o *owner) bool { return o.name == Other }); i >= 0 {
		other.merge(kept[i])
		kept = slices.Delete(kept, i, i+1)
	}
	return append(kept, other)
}

func journalMetrics(ms *set, rd *journal.Read) {
	ms.add(journalFiles, float64(len(rd.Files)))
	ms.add(journalTruncated, bit(rd.Truncated))
	reasons := make([]string, 0, len(rd.SetAside))
	for r := range rd.SetAside {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	for _, r := range reasons {
		ms.add(journalSetAside, float64(rd.SetAside[r]), Label(r))
	}
	for _, o := range owners(rd.Records) {
		for _, oc := range journal.Outcomes {
			ms.add(jobsTotal, float64(o.jobs[oc]), o.name, string(oc))
		}
		ms.add(heldTotal, float64(o.held)/1000, o.name)
		ms.add(waitedTotal, float64(o.waited)/1000, o.name)
	}
}
