// Package journal is gpuexec's job journal: one JSON line per job that
// queued for the GPU lock, appended when the job ends, whatever the end, by
// any number of gpuexec processes of the lock folder's group at once. It
// says what ran on the GPU, who waited how long, and what became of each
// job; `gpuexec report`, `gpuexec top` and the metrics read it back.
//
// Every byte read back is another user's word (any member of the folder's
// group may append a line): Read bounds what it reads, keeps only records
// that Validate accepts, and says how many lines it set aside and why. The
// strings of a record read back are raw: escape them wherever they are
// shown (package escape).
package journal

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
	"unicode/utf8"
)

// Version is the record format written here (Record.V). A line of another
// version is set aside by Read.
const Version = 1

// Outcome is how a job ended.
type Outcome string

// The outcomes. Every job that queued ends with exactly one.
const (
	// OK: the command ran and exited 0.
	OK Outcome = "ok"
	// Failed: the command ran and failed (Status is gpuexec's exit
	// status: the command's, or 128+N for a signal N that gpuexec did not
	// send), or could not be started once the lock was held.
	Failed Outcome = "failed"
	// Timeout: the command was stopped at --timeout.
	Timeout Outcome = "timeout"
	// Deferred: gpuexec gave up waiting (--wait): the job did not run.
	Deferred Outcome = "deferred"
	// Interrupted: a signal to gpuexec ended the job, while it waited
	// (the job did not run) or while it ran (forwarded to it).
	Interrupted Outcome = "interrupted"
	// Lost: the lock was lost while the job ran and the job was stopped.
	Lost Outcome = "lost"
	// OverBudget: a sharer over its --vram budget was stopped
	// (--vram-enforce).
	OverBudget Outcome = "overbudget"
	// Refused: gpuexec could not use the lock (a lock file it refused, a
	// folder it may not write, an etcd cluster out of reach): the job did
	// not run.
	Refused Outcome = "refused"
)

// Outcomes lists every Outcome, in the order reports show them.
var Outcomes = []Outcome{OK, Failed, Timeout, Deferred, Interrupted, Lost, OverBudget, Refused}

// Ran reports whether a job with this outcome held the lock (Deferred and
// Refused jobs never did; an Interrupted one may have: see Record.Started).
func (o Outcome) Ran() bool { return o != Deferred && o != Refused }

// Record is one job, as one line of the journal.
type Record struct {
	// V is the format's version: Version.
	V int `json:"v"`
	// Owner and Slug are the job's --owner and --slug.
	Owner string `json:"owner"`
	Slug  string `json:"slug"`
	// Argv is the command and its arguments, as given (see MaxArgs,
	// MaxArg: longer ones are cut, and Cut says so).
	Argv []string `json:"argv"`
	// Cut is set when Argv was cut to fit.
	Cut bool `json:"cut,omitempty"`
	// User is the name of the user that ran gpuexec; Host the machine's
	// name; PID gpuexec's process id.
	User string `json:"user"`
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Lock is the lock's absolute path, or its etcd:// URL.
	Lock string `json:"lock"`
	// Devices are the devices the job held (--gpus), none without.
	Devices []string `json:"devices,omitempty"`
	// Queued is when gpuexec began to queue, Started when it took the
	// lock (nil if it never did), Ended when it let the lock go or gave
	// up (UTC).
	Queued  time.Time  `json:"queued"`
	Started *time.Time `json:"started,omitempty"`
	Ended   time.Time  `json:"ended"`
	// WaitedMS is how long the job waited for the lock (Queued to
	// Started, or to Ended if it never took it); HeldMS how long it held
	// it (Started to Ended), in milliseconds.
	WaitedMS int64 `json:"waited_ms"`
	HeldMS   int64 `json:"held_ms"`
	// Outcome is how the job ended; Status is gpuexec's exit status.
	Outcome Outcome `json:"outcome"`
	Status  int     `json:"status"`
	// Signal names the signal that ended an Interrupted job.
	Signal string `json:"signal,omitempty"`
	// TimeoutMS is the job's --timeout, 0 for none.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// VRAMMiB is the job's --vram (its budget, with Share), 0 for none.
	VRAMMiB int64 `json:"vram_mib,omitempty"`
	Share   bool  `json:"share,omitempty"`
	// PeakMiB is the most video memory the job's processes used at once,
	// as sampled while it ran (a lower bound); nil when it was not
	// measured (no nvidia-smi, a job shorter than the first sample, a
	// driver that does not report per-process memory).
	PeakMiB *int64 `json:"peak_vram_mib,omitempty"`
	// UnusedMS is how long the job held the lock with its processes using
	// no video memory, as sampled (nil when not measured, as PeakMiB);
	// IdleWarned says that gpuexec warned of it (--idle-warn).
	UnusedMS   *int64 `json:"unused_ms,omitempty"`
	IdleWarned bool   `json:"idle_warned,omitempty"`
}

// Bounds of a record: a line longer than MaxLine is set aside by Read;
// Argv is cut to MaxArgs arguments of MaxArg bytes each before it is
// written (Record.Cut).
const (
	MaxLine = 64 << 10
	MaxArgs = 64
	MaxArg  = 512
	// maxText bounds every other string of a record but Lock.
	maxText = 1024
	// maxPath bounds Lock: a path as long as Linux takes (PATH_MAX).
	maxPath = 4096
	// maxDevices bounds Devices.
	maxDevices = 64
	// maxSpan bounds each duration and the span of a record's times: a
	// year.
	maxSpan = 366 * 24 * time.Hour
	// maxMiB bounds the memory figures: 16 TiB.
	maxMiB = 16 << 20
)

// CutArgv returns argv cut to MaxArgs arguments of at most MaxArg bytes
// (cut at a rune boundary), and whether anything was cut.
func CutArgv(argv []string) ([]string, bool) {
	many := len(argv) > MaxArgs
	if many {
		argv = argv[:MaxArgs]
	}
	out, cut := cutEach(argv, MaxArg)
	return out, many || cut
}

// cutEach is argv with each argument cut to at most most bytes, at a rune
// boundary, and whether one was.
func cutEach(argv []string, most int) ([]string, bool) {
	cut := false
	out := make([]string, len(argv))
	for i, a := range argv {
		if len(a) > most {
			n := most
			for n > 0 && !utf8.RuneStart(a[n]) {
				n--
			}
			a, cut = a[:n], true
		}
		out[i] = a
	}
	return out, cut
}

// ErrInvalid is the error (errors.Is) of Validate.
var ErrInvalid = errors.New("not a valid journal record")

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// Validate reports whether r is a record gpuexec could have written: the
// version, an outcome it knows, times in order (Queued ≤ Started ≤ Ended,
// no span over a year), durations and figures in range and agreeing with
// the times to within a second, strings and lists within their bounds. It
// does not check that the strings are printable: escape them where they
// are shown.
func (r *Record) Validate() error {
	switch {
	case r.V != Version:
		return invalid("version %d, not %d", r.V, Version)
	case !slices.Contains(Outcomes, r.Outcome):
		return invalid("unknown outcome")
	case r.Queued.IsZero() || r.Ended.IsZero():
		return invalid("no queued or ended time")
	case r.Ended.Before(r.Queued) || r.Ended.Sub(r.Queued) > maxSpan:
		return invalid("ended before it queued, or over a year after")
	case r.Started != nil && (r.Started.Before(r.Queued) || r.Ended.Before(*r.Started)):
		return invalid("started outside its queued and ended times")
	case r.Started == nil && r.HeldMS != 0:
		return invalid("held without starting")
	case r.Started != nil && !r.Outcome.Ran():
		return invalid("a %s job that started", r.Outcome)
	case r.Status < 0 || r.Status > 255:
		return invalid("exit status out of range")
	case (r.Outcome == OK) != (r.Status == 0):
		return invalid("outcome and exit status disagree")
	case r.PID < 0:
		return invalid("negative pid")
	case len(r.Argv) > MaxArgs || len(r.Devices) > maxDevices:
		return invalid("too many arguments or devices")
	}
	for _, d := range []int64{r.WaitedMS, r.HeldMS} {
		if d < 0 || d > maxSpan.Milliseconds() {
			return invalid("a duration out of range")
		}
	}
	// A --timeout is a setting, not a span of the record: any that
	// a duration holds.
	if r.TimeoutMS < 0 || r.TimeoutMS > math.MaxInt64/int64(time.Millisecond) {
		return invalid("a timeout out of range")
	}
	started := r.Ended
	if r.Started != nil {
		started = *r.Started
	}
	if !near(r.WaitedMS, started.Sub(r.Queued)) || !near(r.HeldMS, r.Ended.Sub(started)) {
		return invalid("waited or held disagrees with its times")
	}
	for _, m := range []*int64{&r.VRAMMiB, r.PeakMiB} {
		if m != nil && (*m < 0 || *m > maxMiB) {
			return invalid("a memory figure out of range")
		}
	}
	if r.UnusedMS != nil && (*r.UnusedMS < 0 || *r.UnusedMS > r.HeldMS+1000) {
		return invalid("unused for longer than held")
	}
	for _, a := range r.Argv {
		if len(a) > MaxArg {
			return invalid("an argument too long")
		}
	}
	if len(r.Lock) > maxPath {
		return invalid("a lock path too long")
	}
	for _, s := range append([]string{r.Owner, r.Slug, r.User, r.Host, r.Signal}, r.Devices...) {
		if len(s) > maxText {
			return invalid("a name too long")
		}
	}
	return nil
}

// near reports whether ms milliseconds is d to within a second.
func near(ms int64, d time.Duration) bool {
	diff := ms - d.Milliseconds()
	return diff >= -1000 && diff <= 1000
}

// Suffix names the journal of a lock file when none is given: beside the
// lock, "<lock>.journal" (gpu.lock.journal).
const Suffix = ".journal"
