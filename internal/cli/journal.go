package cli

// The job's journal line: how the job ended (supervisor.End), as a
// journal.Record appended once supervisor.Run has returned, the lock
// released.

import (
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/lock"
	"github.com/gpuexec/gpuexec/supervisor"
)

// idleWarnOff is what --idle-warn takes for "no warning" besides 0.
var idleWarnOff = &endless{words: []string{"off", "never"}, value: 0, hint: "to give no warning, write off"}

// idleWarnFlag is --idle-warn.
func idleWarnFlag() *cli.GenericFlag {
	return durationFlag("idle-warn", 20*time.Minute, "IDLE_WARN",
		"warn once (in the log and the journal) when the job holds a whole card and its processes have used no video memory for this long (needs nvidia-smi); 0 or off: never", idleWarnOff)
}

// jobJournal is where the job's line goes and what it says besides how the
// job ended.
type jobJournal struct {
	path string // "" for none
	// explicit: --journal or GPUEXEC_JOURNAL named it (not the default
	// beside the lock).
	explicit bool
	cfg      supervisor.Config
	argv     []string
}

// newJobJournal is the journal of the job cfg run by c: see journalPath.
func newJobJournal(c *cli.Context, cfg supervisor.Config) (*jobJournal, error) {
	b := cfg.Backend
	if b == nil {
		b = lock.Files
	}
	p, err := journalPath(c, cfg.Lock.Path, b)
	if err != nil {
		return nil, err
	}
	return &jobJournal{path: p, explicit: c.String("journal") != "", cfg: cfg, argv: cfg.Argv}, nil
}

// record is the journal line of the job that ended as e.
func (j *jobJournal) record(e supervisor.End) journal.Record {
	host, _ := os.Hostname()
	r := journal.Record{
		V:          journal.Version,
		Owner:      j.cfg.Lock.Owner,
		Slug:       j.cfg.Lock.Slug,
		Argv:       j.argv,
		User:       lock.DefaultOwner(),
		Host:       host,
		PID:        os.Getpid(),
		Lock:       j.cfg.Lock.Path,
		Devices:    e.Devices,
		Ended:      e.Ended.UTC(),
		Outcome:    journal.Outcome(e.Outcome),
		Status:     e.Status,
		Signal:     e.Signal,
		TimeoutMS:  j.cfg.Timeout.Milliseconds(),
		VRAMMiB:    int64(j.cfg.VRAM),
		Share:      j.cfg.Share,
		IdleWarned: e.IdleWarned,
	}
	// The durations are measured (on the monotonic clock where End's
	// times have its readings), the times anchored at the end: a wall
	// clock stepped while the job waited or ran (NTP, a suspended
	// machine, a clock set by hand) changes neither, and the record's
	// times stay in order and agree with its durations (Validate).
	startedAt := e.Ended
	if !e.Started.IsZero() {
		startedAt = e.Started
	}
	waited, held := max(0, startedAt.Sub(e.Queued)), max(0, e.Ended.Sub(startedAt))
	r.Queued = r.Ended.Add(-held - waited)
	if !e.Started.IsZero() {
		s := r.Ended.Add(-held)
		r.Started = &s
	}
	r.WaitedMS, r.HeldMS = waited.Milliseconds(), held.Milliseconds()
	if e.Sampled {
		peak, unused := int64(e.Peak), min(e.Unused.Milliseconds(), r.HeldMS)
		r.PeakMiB, r.UnusedMS = &peak, &unused
	}
	return r
}

// write appends the line of the job that ended as e, if it has a journal;
// one that cannot be written is one warning in log, and changes nothing
// else. A job the lock refused writes no line beside a lock it could not
// use, only to a journal named elsewhere.
func (j *jobJournal) write(e supervisor.End, log hclog.Logger) {
	if j == nil || j.path == "" || e.Outcome == supervisor.Refused && !j.explicit {
		return
	}
	if err := journal.Append(j.path, j.record(e)); err != nil {
		log.Warn("could not write the job's line in the journal", "journal", j.path, "error", err)
	}
}
