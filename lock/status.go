package lock

import "time"

// State is what a lock file says about the lock.
type State string

// The states a lock can be in.
const (
	StateFree  State = "free"  // no lock file
	StateHeld  State = "held"  // a live holder, or a record still being written
	StateStale State = "stale" // the holder is gone or its heartbeat stopped
)

// Status is a lock file as read and judged at one instant. It may be out of
// date as soon as it is returned.
type Status struct {
	State State `json:"state"`
	// Path is the lock file's absolute path (an etcd lock's URL).
	Path string `json:"path"`
	// Device is the device whose lock this is, when it was asked for as
	// one of Options.Devices.
	Device string `json:"device,omitempty"`
	// Info is the parsed record; nil when the lock is free or its content
	// is not a valid record.
	Info *Info `json:"info,omitempty"`
	// Fields holds every top-level field of the record as read, unknown ones
	// included; nil when the content is not a JSON object.
	Fields map[string]any `json:"fields,omitempty"`
	// Content is the raw content (at most 64 KiB).
	Content []byte `json:"content,omitempty"`
	// ModTime is the file's mtime, i.e. the last heartbeat.
	ModTime time.Time `json:"modTime"`
	// HeartbeatAge is how long ago ModTime was, at the time of judging. It
	// is negative for an mtime in the future.
	HeartbeatAge time.Duration `json:"heartbeatAge"`
	// Alive reports whether the holder is taken to be alive (the lock is
	// held); false for free and stale locks.
	Alive bool `json:"alive"`
	// Reason says why the lock is judged as it is: why it is stale, or what
	// keeps an odd-looking lock alive. Empty for an ordinary live holder.
	Reason string `json:"reason,omitempty"`

	// Sharers are the live sharers of a lock held in shared mode
	// (Info.Share), with their budgets; nil otherwise.
	Sharers []Sharer `json:"sharers,omitempty"`

	// What the OS said, as Inspect or Clear returned a held lock, of its
	// holder and its job, on this host; left empty for a holder on
	// another host, and for a cover or shared record (whose holder is one
	// of several), and by every other function. Only what was verified
	// is told (see ProcState).
	//
	// HolderProcess is the holder's process (Info.PID): ProcGone while
	// the lock is held means that something else keeps it held (its
	// job's processes, see JobGroup); "" when its pid cannot be told
	// from another process (a record without Info.PIDStart, a start
	// time that cannot be read).
	HolderProcess ProcState `json:"holderProcess,omitempty"`
	// JobGroup is the process group of the holder's job (Unix), as the
	// record (Info.ChildPGID) or the holder's liveness file notes it;
	// 0 when none is noted with its leader's start time.
	JobGroup int `json:"jobGroup,omitempty"`
	// JobProcess is JobGroup's state: ProcRunning while a process of it
	// may run, ProcStopped when every one is stopped, ProcGone when none
	// is left; "" when JobGroup is 0.
	JobProcess ProcState `json:"jobProcess,omitempty"`
	// JobGroupDoubt, when not nil, says that JobGroup is not vouched
	// for as the holder's job: it runs as another user than the one who
	// owns the record that names it. Anyone who may write in the folder
	// can name anyone's group there, as can a job that took another uid
	// (sudo): such a group is no process a caller should be told to end
	// as the job's. nil otherwise (and off Unix, where a file's owner is
	// not compared).
	JobGroupDoubt *ForeignGroup `json:"jobGroupDoubt,omitempty"`

	// Orphan, when not "", is the path of the liveness file that keeps
	// the lock held although its record is gone (a forced clear) while
	// the holder's job still runs; Info is nil then, and Holder names
	// the job. OrphanGroup is the job's process group that file notes,
	// 0 when it notes none.
	Orphan      string `json:"orphan,omitempty"`
	OrphanGroup int    `json:"orphanGroup,omitempty"`

	// recordOwner is the uid that owns the lock file as read, when
	// ownerTold (not on Windows, nor for a Status not read from a file).
	recordOwner int
	ownerTold   bool

	// orphanRefused says why the note that keeps it held, in a file
	// nobody holds, is not its file owner's word (see keptStatus): held
	// only while that file is fresh, and clear --force removes it.
	orphanRefused string
	// keptBy are the process groups whose processes alone keep a lock
	// held whose holder is gone (see judge): what a waiter looks at
	// between tries.
	keptBy []int
	// keptChecked is when a waiter last looked at every process of
	// keptBy (see holderGone).
	keptChecked time.Time
}

// ForeignGroup is why a job's process group is not vouched for: the record
// that names it is RecordUID's (the lock file's owner), while the group
// runs as GroupUID. A uid that was not told is -1.
type ForeignGroup struct {
	RecordUID int `json:"recordUid"`
	GroupUID  int `json:"groupUid"`
}

// Waiter is one ticket in the queue, for status displays.
type Waiter struct {
	// Position is 1 for the next waiter to be served.
	Position int    `json:"position"`
	Seq      uint64 `json:"seq"`
	PID      int    `json:"pid"`
	Owner    string `json:"owner"`
	Slug     string `json:"slug"`
	Host     string `json:"host,omitempty"`
	// Since is when it started waiting (UTC ISO-8601 with milliseconds).
	Since string `json:"since"`
	// Locks are the lock files it waits for (base names); empty for a
	// ticket that does not say (it is taken to wait for every lock).
	Locks []string `json:"locks,omitempty"`
	// Alive is false for a ticket whose waiter is gone (not yet pruned).
	Alive bool `json:"alive"`
	// Process is what the OS says of a live waiter's process on this
	// host (ProcStopped: it keeps its place but takes nothing, and a
	// free lock idles until the waiters behind pass it); "" when its pid
	// cannot be told from another process (a ticket of an older gpuexec,
	// without the waiter's start time) or it waits on another host.
	Process ProcState `json:"process,omitempty"`
}

// ProcState is what the OS says of a process or a job's process group,
// verified against its start time (a pid read from the lock's folder may
// have been reused, or be anyone's). Off Linux, where a stopped process is
// not told, one that exists is ProcUnknown.
type ProcState string

// The states a holder's or waiter's process, or a job's group, is seen in.
const (
	ProcRunning ProcState = "running" // it may run (a group: some process of it)
	ProcStopped ProcState = "stopped" // stopped (Ctrl+Z, SIGSTOP, a debugger): it does nothing until continued
	ProcGone    ProcState = "gone"    // no such process (a group: none of it left)
	ProcUnknown ProcState = "unknown" // it exists; whether it is stopped is not told
)

// Report is what Inspect finds: each lock as judged and the queue.
type Report struct {
	// Path is the lock's path, absolute (with devices, the queue's).
	Path string `json:"path"`
	// Locks are the lock, or each device's in Options.Devices' order.
	Locks []*Status `json:"locks"`
	// Queue lists the waiters in arrival order, live and dead.
	Queue []Waiter `json:"queue"`
	// Beside are, for a lock file asked for without Options.Devices, the
	// device locks that exist beside it (those of jobs run with
	// devices, which keep its jobs from starting while they are held),
	// each as judged and told as Locks are, in device order; a device
	// lock that cannot be read is left out. nil with devices and for
	// other backends.
	Beside []*Status `json:"beside,omitempty"`
}
