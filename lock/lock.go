// Package lock is a cross-process mutex held as a lock file created with
// O_CREAT|O_EXCL, compatible with the Node render lock of the seed article:
// both write the same JSON record to the same path, so gpuexec and the
// seed's Node tool exclude each other on one lock.
//
// Guarantees, among processes using this package on one host and a local
// filesystem:
//   - at most one holds the lock at a time, whatever the interleaving,
//     including several waiters judging one stale lock at the same instant;
//   - a lock is removed only by its holder (same pid and token), or after it
//     was judged stale and re-read under rename to be the very lock judged;
//   - a holder's lock is never judged stale while, on this host, its
//     liveness lock (see LiveSuffix) is held, whatever its heartbeat's age
//     (a stopped holder, a clock jump); nor while its heartbeat is younger
//     than Options.Stale and, for records without a liveness lock, its pid
//     is alive (EPERM counts as alive) and was started when the record
//     says, or the process group of its job still runs;
//   - a lock whose record was removed while its holder's liveness lock is
//     still held (a forced clear) stays held until that job ends;
//   - nothing read from the lock's folder becomes a path, no open there
//     follows a symbolic link or blocks on a FIFO, and only regular files
//     with this protocol's names, in that folder, are ever removed;
//   - waiters that compete for a same lock are served in arrival order
//     (see TicketSuffix), but for a head of the queue that leaves a free
//     lock untaken for headGrace, and wake within milliseconds of a
//     release where the folder can be watched.
//
// Against the seed's Node tool, exclusion rests on the lock file's
// O_CREAT|O_EXCL alone, as it always did (see removeIfSame for the one
// window that the seed's own clearing leaves open).
package lock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/internal/safepath"
	"github.com/gpuexec/gpuexec/lock/internal/osfile"
)

// Defaults for zero Options fields; the seed's values.
const (
	DefaultPoll      = 20 * time.Second
	DefaultReport    = 5 * time.Minute
	DefaultHeartbeat = 5 * time.Minute
	DefaultStale     = 90 * time.Minute
)

// DefaultPath is the lock used when none is named: gpuexec/gpu.lock under
// the OS's temporary folder.
func DefaultPath() string {
	return filepath.Join(osfile.TempDir(), "gpuexec", "gpu.lock")
}

// DefaultOwner is the login user name (see loginName for where it comes
// from on each OS), or "unknown".
func DefaultOwner() string {
	if name := loginName(); name != "" {
		return SafeName(name)
	}
	return "unknown"
}

// Options says which lock to take and how to behave while waiting and
// holding. Zero durations take the Default values.
type Options struct {
	// Path is the lock file; its folder is created if missing.
	Path string
	// Owner and Slug are recorded in the lock: who holds it and which job.
	Owner, Slug string
	// Poll is how often a waiter re-checks the lock.
	Poll time.Duration
	// Report is how often a waiter logs the current holder.
	Report time.Duration
	// Heartbeat is how often a holder touches the lock file's mtime.
	Heartbeat time.Duration
	// Stale is the heartbeat age after which a lock is stale.
	Stale time.Duration
	// Logger receives the waiting, acquired, stale-cleared, lost and
	// released lines. Nil logs nothing.
	Logger hclog.Logger
}

// MinInterval is the shortest Poll, Report, Heartbeat and Stale allowed:
// each is work done while waiting or holding (a heartbeat takes the guard
// and touches the lock), and a nanosecond would keep a core busy doing it.
const MinInterval = time.Millisecond

// ErrInvalid is wrapped by errors about Options.
var ErrInvalid = errors.New("lock: invalid options")

func (o Options) withDefaults() (Options, error) {
	def := func(d *time.Duration, v time.Duration, name string) error {
		switch {
		case *d == 0:
			*d = v
		case *d < 0:
			return fmt.Errorf("%w: %s must be positive, not %s", ErrInvalid, name, *d)
		}
		return nil
	}
	if o.Path == "" {
		return o, fmt.Errorf("%w: empty lock path", ErrInvalid)
	}
	if IsRemote(o.Path) {
		return o, errRemotePath(o.Path)
	}
	abs, err := resolve(o.Path)
	if err != nil {
		return o, err
	}
	o.Path = abs
	if err := errors.Join(
		def(&o.Poll, DefaultPoll, "poll"),
		def(&o.Report, DefaultReport, "report"),
		def(&o.Stale, DefaultStale, "stale"),
		def(&o.Heartbeat, min(DefaultHeartbeat, o.Stale/3), "heartbeat"),
	); err != nil {
		return o, err
	}
	if o.Heartbeat >= o.Stale {
		return o, fmt.Errorf("%w: heartbeat (%s) must be shorter than stale (%s), or a live holder looks stale", ErrInvalid, o.Heartbeat, o.Stale)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"poll", o.Poll}, {"report", o.Report}, {"heartbeat", o.Heartbeat}, {"stale", o.Stale}} {
		if d.v < MinInterval {
			return o, fmt.Errorf("%w: %s (%s) must be at least %s", ErrInvalid, d.name, d.v, MinInterval)
		}
	}
	for _, n := range []struct{ name, v string }{{"owner", o.Owner}, {"slug", o.Slug}} {
		if err := CheckName(n.v); err != nil {
			return o, fmt.Errorf("%w: %s %s", ErrInvalid, n.name, err)
		}
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return o, nil
}

// resolve makes a lock path absolute, its folder resolved to one that no
// other user can redirect (see package safepath): the lock's files are
// then found and made there by name, and nowhere else, for as long as the
// process runs. A folder another user could move away or point elsewhere
// is refused with a *FolderError.
func resolve(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%w: lock path %q: %v", ErrInvalid, path, err)
	}
	dir, err := safepath.Dir(filepath.Dir(abs), false, false)
	if err != nil {
		return "", &FolderError{Dir: filepath.Dir(abs), Err: err}
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}

// makeFolder creates the lock's folder dir (resolved, see resolve) and
// the folders above it that are missing, each only where no other user
// could move it away, as the umask has it. A folder that is there was
// checked when the path was resolved, and nobody else can change it.
func makeFolder(dir string) error {
	if fi, err := os.Lstat(dir); err == nil && fi.IsDir() {
		return nil
	}
	if _, err := safepath.Dir(dir, true, false); err != nil {
		var se *safepath.Error
		if errors.As(err, &se) {
			return &FolderError{Dir: dir, Err: err}
		}
		return err
	}
	return nil
}

// ErrHeld is returned by Clear for a lock whose holder is alive.
var ErrHeld = errors.New("lock: held by a live holder")

// WaitError is returned by Acquire when ctx ends before the lock is had. It
// wraps ctx's error: errors.Is(err, context.DeadlineExceeded) tells a
// deadline from a cancellation.
type WaitError struct {
	// Holder is the lock as last seen while waiting.
	Holder *Status
	// Waited is how long Acquire waited.
	Waited time.Duration
	Err    error
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("lock: gave up after %s: held by %s: %v", fmtAge(e.Waited), e.Holder.Holder(), e.Err)
}

func (e *WaitError) Unwrap() error { return e.Err }

// Acquire queues for the lock until it holds it or ctx ends.
//
// Waiters are served first come, first served: on arrival Acquire takes a
// ticket beside the lock (see TicketSuffix) and does not take a free lock
// while a live waiter that arrived earlier is queued. It wakes within
// milliseconds when the lock is released or cleared (it watches the lock's
// folder), checks every LivenessProbe whether the holder's job is gone, and
// re-checks everything every Options.Poll in any case (the fallback where
// the folder cannot be watched, e.g. network shares). It clears stale locks
// (logging why) and logs the holder and its queue position every
// Options.Report. The returned lock is kept alive by a heartbeat until
// Release.
//
// When ctx ends first the error is a *WaitError and the ticket is gone;
// other errors (an unusable path, a lock path that is not a regular file or
// not a lock) end the wait at once.
func Acquire(ctx context.Context, o Options) (*Held, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	var h *Held
	err = queueFor(ctx, o, []string{o.Path}, func(ctx context.Context, pl *place) (bool, []*Status, error) {
		got, st, err := attempt(ctx, o, pl)
		h = got
		return got != nil, []*Status{st}, err
	})
	return h, explain(o.Path, err)
}

// place is a waiter's place in the queue between its tries: the queue as
// it sees it, its ticket (nil until it has one), its position at the last
// try, and what it knows of a head that does not take a free lock.
type place struct {
	q      *queue
	queued bool // it takes a ticket (Acquire); TryAcquire does not
	tk     *ticket
	pos    int // 1 for the head; 0 when not queued
	// pass is how many live waiters ahead this try may pass: those
	// that left the lock free for longer than headGrace each (see
	// waitForChange).
	pass int
	// freeSince is when this waiter, behind the head, first found a
	// lock it waits for free and not taken; zero when it did not.
	freeSince time.Time
}

func (pl *place) seq() uint64 {
	if pl.tk == nil {
		return 0
	}
	return pl.tk.seq
}

// tryFunc makes one try for what the caller queues for, reporting whether
// it got it and the locks as seen.
type tryFunc func(ctx context.Context, pl *place) (got bool, seen []*Status, err error)

// queueFor is the waiting loop shared by Acquire and AcquireDevices: one try
// without a ticket (the common case, a free lock and nobody queued, needs
// no ticket and no watch), then a ticket and tries whenever something may
// have changed, until try gets it, ctx ends, or an error. locks are the lock
// files the waiter may take; their release wakes it.
func queueFor(ctx context.Context, o Options, locks []string, try tryFunc) error {
	start := time.Now()
	if err := makeFolder(filepath.Dir(o.Path)); err != nil {
		return err
	}
	acquired := func() {
		o.Logger.Info("acquired GPU lock", "path", o.Path, "owner", o.Owner, "slug", o.Slug,
			"waited", fmtAge(time.Since(start)))
	}
	pl := &place{q: newQueue(o.Path, locks)}
	got, seen, err := try(ctx, pl)
	switch {
	case err != nil && ctx.Err() != nil:
		return &WaitError{Waited: time.Since(start), Err: ctx.Err()}
	case err != nil:
		return err
	case got:
		acquired()
		return nil
	}
	// Watch before the next look, so that no release goes unnoticed.
	wk, werr := newWaker(o.Path, locks)
	if werr != nil {
		o.Logger.Debug("cannot watch the lock's folder; polling", "path", o.Path, "poll", o.Poll, "error", werr)
	}
	defer wk.close()
	// What the record says of this process is the same at every try:
	// work it out while waiting, not when the lock is handed over.
	proc.HostName()
	selfStartOnce.Do(findSelfStart)

	pl.queued = true
	defer func() { pl.tk.drop() }()
	var nextReport time.Time
	poll := time.NewTimer(o.Poll)
	defer poll.Stop()
	probe := time.NewTicker(LivenessProbe)
	defer probe.Stop()
	for {
		last := seen
		got, seen, err = try(ctx, pl)
		pl.pass = 0
		if seen == nil {
			seen = last // a try cut short by ctx saw nothing new
		}
		if err != nil {
			if ctx.Err() != nil {
				return &WaitError{Holder: firstHeld(seen), Waited: time.Since(start), Err: ctx.Err()}
			}
			return err
		}
		if got {
			acquired()
			return nil
		}
		if now := time.Now(); !now.Before(nextReport) {
			o.Logger.Info(waitingLine(seen, pl.pos), "path", o.Path, "waited", fmtAge(now.Sub(start)))
			nextReport = now.Add(o.Report)
		}
		poll.Reset(o.Poll)
		if !waitForChange(ctx, o, seen, pl, wk, poll, probe) {
			return &WaitError{Holder: firstHeld(seen), Waited: time.Since(start), Err: ctx.Err()}
		}
		pl.tk.touch(o.Heartbeat)
	}
}

// firstHeld is the first lock in seen that is not free, for messages.
func firstHeld(seen []*Status) *Status {
	for _, st := range seen {
		if st != nil && st.State != StateFree {
			return st
		}
	}
	if len(seen) > 0 {
		return seen[0]
	}
	return nil
}

// LivenessProbe is how often a waiter checks whether the holder's job is
// gone (its liveness lock free, or for the seed's records its pid gone): a
// non-blocking kernel-lock test or kill(pid, 0), a few microseconds each.
const LivenessProbe = 100 * time.Millisecond

// headGrace is how long the head of the queue may leave a free lock
// untaken before the waiter behind it takes it instead. A live head takes a
// released lock within milliseconds; one that does not is stopped (Ctrl+Z,
// SIGSTOP, a debugger) or starved, and must not keep the GPU idle while
// others wait. It keeps its ticket, and with it its place at the front
// once it runs again. Each further waiter behind passes one more such head
// after one more headGrace, so that live waiters keep their order.
const headGrace = 2 * time.Second

// waitForChange blocks until something may have changed for the waiter at
// pl: for the head of the queue, a release seen in the folder or a holder
// found gone by the liveness probe; for a waiter behind it, the live rival
// ticket just ahead of its own leaving the queue (found by the folder's
// events, or by the probe where its waiter died), none live left ahead (it
// is the head now), or a lock it waits for left free by the waiters ahead
// for long enough to pass them (see headGrace); for any, a lock turning
// stale or the poll timer. Releases do not wake a waiter behind the head:
// the head takes the lock, and waking the others would only cost them CPU
// at every handoff. It returns false when ctx ends.
func waitForChange(ctx context.Context, o Options, seen []*Status, pl *place, wk *waker, poll *time.Timer, probe *time.Ticker) bool {
	// A lock turns stale at a known time (a record never written, a
	// heartbeat that stopped): look again then, not a poll later.
	var staleC <-chan time.Time
	if at, ok := turnsStale(o, seen); ok {
		t := time.NewTimer(time.Until(at) + staleMargin)
		defer t.Stop()
		staleC = t.C
	}
	seq := pl.seq()
	head := pl.pos <= 1 || seq == 0
	var ahead string // the ticket this waiter follows, behind the head
	if head {
		pl.freeSince = time.Time{}
		if wk.watchReleases() {
			// The folder was not watched until now: a release
			// before then went unseen.
			if _, free := look(o, seen); free {
				return true
			}
		}
	} else if ahead = follow(pl, wk); ahead == "" {
		return true
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-staleC:
			return true
		case <-wk.C():
			if head {
				return true
			}
		case <-wk.Left():
			if head {
				continue
			}
			was := ahead
			if ahead = follow(pl, wk); ahead == "" {
				return true // nobody live ahead: the head now
			}
			if ahead != was {
				pl.freeSince = time.Time{}
			}
		case <-poll.C:
			return true
		case <-probe.C:
			if !head {
				// A waiter ahead that died leaves its ticket:
				// follow the next one ahead (the front of the
				// queue prunes dead tickets).
				if !ticketAlive(ahead) {
					pl.freeSince = time.Time{}
					if ahead = follow(pl, wk); ahead == "" {
						return true
					}
				}
				if pl.passHeads(time.Now()) {
					return true
				}
				continue
			}
			for _, st := range seen {
				if holderGone(st) {
					return true
				}
			}
		}
	}
}

// passHeads is the probe of a waiter behind the head: it notes whether a
// lock it waits for is free, and reports whether the waiters ahead have
// left it free long enough (headGrace for each) to be passed, setting
// pl.pass for the next try.
func (pl *place) passHeads(now time.Time) bool {
	free := false
	for _, p := range pl.q.paths {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			free = true
			break
		}
	}
	if !free {
		pl.freeSince = time.Time{}
		return false
	}
	if pl.freeSince.IsZero() {
		pl.freeSince = now
	}
	k := max(pl.pos-1, 1)
	if now.Sub(pl.freeSince) < time.Duration(k)*headGrace {
		return false
	}
	pl.pass = k
	// Should the try not take it (the head took it meanwhile, or a
	// device set needs more), look again only a grace later.
	pl.freeSince = now
	return true
}

// follow finds the live rival ticket nearest ahead of pl's and has wk
// watch it, returning its path, or "" when no live rival is ahead.
func follow(pl *place, wk *waker) string {
	seq := pl.seq()
	for range maxAttempts {
		tickets, err := listTickets(pl.q.anchor)
		if err != nil {
			return ""
		}
		var ahead string
		for i := len(tickets) - 1; i >= 0; i-- {
			if t := tickets[i]; t.seq < seq && pl.q.rival(t) && ticketAlive(t.path) {
				ahead = t.path
				break
			}
		}
		if ahead == "" {
			return ""
		}
		if wk.follow(ahead) {
			return ahead
		}
		// Gone between the listing and the watch: list again.
	}
	return ""
}

// staleMargin is added to the time a lock turns stale before looking again,
// so that the look finds it stale.
const staleMargin = 10 * time.Millisecond

// turnsStale is the earliest time at which one of the held locks seen turns
// stale by its mtime alone.
func turnsStale(o Options, seen []*Status) (time.Time, bool) {
	var at time.Time
	for _, st := range seen {
		if st == nil || st.State != StateHeld || st.orphan != "" {
			continue
		}
		t := st.ModTime.Add(o.Stale)
		if st.Info == nil {
			t = st.ModTime.Add(WriteGrace)
		}
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at, !at.IsZero()
}

// look re-reads and judges the locks seen, without the guard, reporting
// whether any is free or stale (or cannot be read: trying will tell why).
func look(o Options, seen []*Status) ([]*Status, bool) {
	fresh := make([]*Status, len(seen))
	for i, st := range seen {
		if st == nil {
			return seen, true
		}
		now, err := readStatus(st.Path)
		if err != nil || now.State == StateFree {
			return seen, true
		}
		judge(now, time.Now(), o.Stale, osProber{lockPath: st.Path})
		if now.State != StateHeld {
			return seen, true // stale: trying clears it
		}
		fresh[i] = now
	}
	return fresh, false
}

// holderGone is the liveness probe: whether the holder seen in st has
// visibly ended (its liveness lock is free, or its pid is gone).
func holderGone(st *Status) bool {
	if st != nil && st.orphan != "" {
		// Gone, or free: the job whose record was removed ended (a try
		// under the guard tells which).
		held, _, _ := probeLiveFile(st.orphan)
		return !held
	}
	if st == nil || st.State != StateHeld || st.Info == nil || !sameHost(st.Info.Host) {
		return false
	}
	if held, known, _ := probeLive(st.Path, st.Info.Token); known {
		return !held
	}
	return !proc.Alive(st.Info.PID)
}

// waitingLine is the line a waiter logs:
// "waiting for GPU lock: held by channels/ep12 (pid 4242) since 20:18 (position 2 in queue)";
// for several devices, each device's holder.
func waitingLine(seen []*Status, pos int) string {
	var s string
	switch {
	case len(seen) == 1 && seen[0] != nil && seen[0].State != StateFree:
		s = "waiting for GPU lock: held by " + heldBy(seen[0])
	case len(seen) > 1:
		parts := make([]string, 0, len(seen))
		for _, st := range seen {
			if st == nil {
				continue
			}
			name := filepath.Base(st.Path)
			if st.State == StateFree {
				parts = append(parts, name+" free")
			} else {
				parts = append(parts, name+" held by "+heldBy(st))
			}
		}
		s = "waiting for GPU locks: " + strings.Join(parts, ", ")
	default:
		s = "waiting for GPU lock: free, but earlier arrivals go first"
	}
	if pos > 0 {
		s += fmt.Sprintf(" (position %d in queue)", pos)
	}
	return s
}

// heldBy is "channels/ep12 (pid 4242) since 20:18", with the reason when
// the lock is odd.
func heldBy(st *Status) string {
	s := st.Holder()
	if st.Info != nil {
		if t := st.Info.Acquired(); !t.IsZero() {
			s += " since " + t.Local().Format("15:04")
		}
	}
	if st.Reason != "" {
		s += " (" + st.Reason + ")"
	}
	return s
}

// TryAcquire takes the lock if it is free or stale and no waiter is queued
// for it, without waiting. Contention is not an error: it returns
// (nil, false, nil).
func TryAcquire(o Options) (*Held, bool, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, false, err
	}
	if err := makeFolder(filepath.Dir(o.Path)); err != nil {
		return nil, false, explain(o.Path, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clearGuardWait)
	defer cancel()
	h, _, err := attempt(ctx, o, &place{q: newQueue(o.Path, []string{o.Path})})
	if errors.Is(err, context.DeadlineExceeded) {
		err = errGuardStuck(o.Path)
	}
	return h, h != nil, explain(o.Path, err)
}

// errGuardStuck says the guard has been held for longer than any step
// under it takes.
func errGuardStuck(path string) error {
	return fmt.Errorf("lock: another process has held %s for over %s; is a gpuexec stopped (SIGSTOP) mid-step?", path+GuardSuffix, clearGuardWait)
}

// WithLock runs fn while holding the lock, releasing it however fn ends
// (return, error or panic). fn's context is cancelled if the lock is lost.
// The error is fn's, Acquire's or Release's.
func WithLock(ctx context.Context, o Options, fn func(ctx context.Context) error) (err error) {
	h, err := Acquire(ctx, o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.Release()) }()
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-h.Lost():
			cancel()
		case <-fctx.Done():
		}
	}()
	return fn(fctx)
}

// maxAttempts bounds how often one attempt re-tries after clearing a stale
// lock or finding the lock released under it.
const maxAttempts = 4

// attempt makes one try for the lock under the guard, from the place pl
// (see place; one that is queued gets a ticket now if it has none, or anew
// if its ticket was pruned because its waiter stopped for longer than
// Options.Stale). A stale lock is cleared whatever the caller's place; a
// free lock is taken only by the head of the queue, or by a waiter passing
// heads that left it free (pl.pass). It returns the held lock, or nil and
// the lock's status.
func attempt(ctx context.Context, o Options, pl *place) (*Held, *Status, error) {
	if pl.tk == nil {
		if err := refuseNonLock(o.Path); err != nil {
			return nil, nil, err
		}
	}
	g, err := takeGuard(ctx, o.Path)
	if err != nil {
		return nil, nil, err
	}
	defer g.release()
	before, err := queuePlace(g, o, pl)
	if err != nil {
		return nil, nil, err
	}
	var st *Status
	for range maxAttempts {
		if st, err = settle(o); err != nil {
			return nil, nil, err
		}
		if st.State != StateFree || before > pl.pass {
			return nil, st, nil
		}
		h, err := create(o)
		if errors.Is(err, os.ErrExist) {
			continue // someone outside the queue (the seed's tool) was faster
		}
		if err != nil {
			return nil, nil, err
		}
		if before > 0 {
			o.Logger.Warn(fmt.Sprintf("took the free GPU lock ahead of %d waiter(s) that left it untaken for %s (stopped?); they keep their places", before, headGrace), "path", o.Path)
		}
		pl.leave()
		return h, nil, nil
	}
	return nil, st, nil
}

// refuseNonLock refuses, before anything is created beside it (the guard,
// a ticket), a lock path that is no lock gpuexec may use: not a regular
// file, or a file that is not a lock record (see ErrNotLock). A missing
// file is no error. It is checked until the caller has a ticket; after
// that, settle refuses such a file just the same.
func refuseNonLock(path string) error {
	_, err := readStatus(path)
	return err
}

// queuePlace makes sure a queued caller has a ticket and returns how many
// live rival waiters are ahead of it, setting pl.pos (0 when not queued).
// Call with the guard held.
func queuePlace(g *guard, o Options, pl *place) (before int, err error) {
	if pl.queued {
		if pl.tk != nil && !pl.tk.exists() {
			o.Logger.Warn("this waiter's queue ticket was pruned; queueing again at the back", "path", o.Path)
			pl.tk.drop()
			pl.tk = nil
		}
		if pl.tk == nil {
			if pl.tk, err = takeTicket(g, o, pl.q); err != nil {
				return 0, err
			}
		}
	}
	if before, err = ahead(pl.q, pl.seq(), o.Stale); err != nil {
		return 0, err
	}
	pl.pos = 0
	if pl.queued {
		pl.pos = before + 1
	}
	return before, nil
}

// leave drops the caller's ticket once it holds the lock.
func (pl *place) leave() {
	pl.tk.drop()
	pl.tk = nil
}

// settle reads the lock at o.Path and clears it if it is stale (logging
// why), returning it free or held. A lock that keeps changing under it is
// returned as last judged. A lock whose record is gone counts as held while
// a liveness file beside it is still locked: the job of a holder whose
// record was removed (clear --force) still runs. Call with the guard held.
func settle(o Options) (*Status, error) {
	var st *Status
	for range maxAttempts {
		var err error
		if st, err = readStatus(o.Path); err != nil {
			return nil, err
		}
		if st.State == StateFree {
			if busy := sweep(o.Path); busy != nil {
				return busy, nil
			}
			return st, nil
		}
		judge(st, time.Now(), o.Stale, osProber{lockPath: o.Path})
		if st.State == StateHeld {
			return st, nil
		}
		err = removeIfSame(o.Path, st)
		if errors.Is(err, errChanged) {
			o.Logger.Warn("GPU lock changed while clearing it as stale; judging it again", "path", o.Path, "error", err)
			continue
		}
		if err != nil {
			return nil, explainClear(o.Path, st, err)
		}
		if st.Info != nil {
			removeDeadLive(o.Path, st.Info.Token)
		}
		o.Logger.Warn("cleared stale GPU lock", "path", o.Path, "holder", st.Holder(), "reason", st.Reason)
	}
	return st, nil
}

// create takes the liveness lock, then creates the record. Call with the
// guard held and the lock settled free.
func create(o Options) (*Held, error) {
	info := newInfo(o)
	live, err := takeLive(o.Path, info.Token)
	if err != nil {
		return nil, err
	}
	if err := createRecord(o.Path, info); err != nil {
		live.release()
		return nil, err
	}
	return newHeld(o, info, live), nil
}

var (
	selfStartOnce sync.Once
	selfStart     int64
)

func findSelfStart() { selfStart, _ = proc.Start(os.Getpid()) }

func newInfo(o Options) *Info {
	selfStartOnce.Do(findSelfStart)
	return &Info{
		PID:        os.Getpid(),
		AcquiredAt: time.Now().UTC().Format(isoMillis),
		Owner:      o.Owner,
		Slug:       o.Slug,
		Token:      newToken(),
		Host:       proc.HostName(),
		PIDStart:   selfStart,
	}
}

// Inspect reads and judges the lock at path and lists its queue (the
// waiters for it), for status displays; it changes nothing. stale is the
// heartbeat age after which it is stale (0: DefaultStale). A lock whose
// record is gone while its holder's job still runs (see sweep) is held.
func Inspect(path string, stale time.Duration) (*Status, error) {
	o, err := Options{Path: path, Stale: stale}.withDefaults()
	if err != nil {
		return nil, err
	}
	st, err := readStatus(o.Path)
	if err != nil {
		return nil, explain(o.Path, err)
	}
	if st.State != StateFree {
		judge(st, time.Now(), o.Stale, osProber{lockPath: o.Path})
	} else if busy := findOrphan(o.Path); busy != nil {
		st = busy
	}
	if st.Queue, err = readQueue(o.Path, []string{o.Path}); err != nil {
		return nil, err
	}
	return st, nil
}

// clearGuardWait bounds how long Clear, a heartbeat and RecordChild wait
// for the guard, which is normally held for a few system calls at a time: a
// process stopped (SIGSTOP) while holding it must not hang them.
const clearGuardWait = 10 * time.Second

// Clear removes the lock at path if it is stale, and returns it as judged.
// A free lock is not an error, and nothing is created to find it free. A
// live holder's lock is left in place and ErrHeld returned, unless force is
// set. A forced clear never puts two jobs on the GPU: a gpuexec holder
// notices within selfCheck that its record is gone and stops its job, and until
// that job is gone its liveness file keeps the lock held for everyone else
// (see sweep); the seed's Node tool notices at its next heartbeat. Like
// every removal here it renames the lock aside and re-reads it first, so a
// lock created in the meantime is never removed.
func Clear(path string, force bool, stale time.Duration, logger hclog.Logger) (*Status, error) {
	o, err := Options{Path: path, Stale: stale, Logger: logger}.withDefaults()
	if err != nil {
		return nil, err
	}
	// A free lock, and a path that is no lock, are told without the
	// guard: nothing is created beside them, a read-only folder answers.
	st, err := readStatus(o.Path)
	if err != nil {
		return nil, err
	}
	if st.State == StateFree {
		if busy := findOrphan(o.Path); busy != nil {
			return busy, fmt.Errorf("%w: %s; nothing to clear: the lock is free once that job ends", ErrHeld, busy.Holder())
		}
		return st, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), clearGuardWait)
	defer cancel()
	g, err := takeGuard(ctx, o.Path)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, errGuardStuck(o.Path)
	}
	if err != nil {
		return nil, explain(o.Path, err)
	}
	defer g.release()
	if st, err = readStatus(o.Path); err != nil || st.State == StateFree {
		return st, err
	}
	judge(st, time.Now(), o.Stale, osProber{lockPath: o.Path})
	if st.State == StateHeld && !force {
		return st, fmt.Errorf("%w: %s", ErrHeld, st.Holder())
	}
	if err := removeIfSame(o.Path, st); err != nil {
		return st, explainClear(o.Path, st, err)
	}
	reason := st.Reason
	if st.State == StateHeld {
		reason = "forced"
	}
	o.Logger.Warn("cleared GPU lock", "path", o.Path, "holder", st.Holder(), "reason", reason)
	return st, nil
}

// Held is a held lock. Its heartbeat keeps the lock file's mtime fresh until
// Release. Its methods are safe for concurrent use.
type Held struct {
	o    Options
	info *Info
	live *liveLock

	mu       sync.Mutex
	released bool
	file     os.FileInfo // the lock file as written, to tell it is still there

	// Lost is closed when the lock was found to be no longer ours
	// (removed, or replaced by another holder's) at a heartbeat.
	*LostSignal
	stop chan struct{}
	done chan struct{}
}

func newHeld(o Options, info *Info, live *liveLock) *Held {
	h := &Held{
		o:    o,
		info: info,
		live: live,

		LostSignal: NewLostSignal(),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	// Seen from before the record can be removed (newHeld runs under
	// the guard, which every removal takes).
	h.file, _ = os.Lstat(o.Path)
	go h.heartbeat()
	return h
}

// selfCheck is how often a holder looks whether its lock file is still the
// file it wrote (one lstat): a forced clear, or the seed's tool clearing it
// by its mtime, is noticed within a second, not a heartbeat later.
// (Watching the folder would notice at once, but closing an inotify
// instance waits for the kernel's SRCU grace period, 10-20 ms here, at
// every release.)
const selfCheck = time.Second

// Path is the lock file's absolute path.
func (h *Held) Path() string { return h.o.Path }

// LiveFile is the open liveness file whose kernel lock marks this holder
// alive (see LiveSuffix). Pass it to the processes that do the guarded work
// (exec.Cmd.ExtraFiles on Unix) and the lock stays alive, even if this
// process is killed, for as long as any of them runs. Do not close it.
func (h *Held) LiveFile() *os.File { return h.live.f }

// Info is the record written into the lock file.
func (h *Held) Info() Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	return *h.info
}

func (h *Held) markLost(why error) {
	h.MarkLost(why, func() { h.o.Logger.Error("GPU lock lost", "path", h.o.Path, "reason", why) })
}

// heartbeat touches the lock every Options.Heartbeat, and checks that it
// is still ours within selfCheck of the lock file being removed or
// replaced: a forced clear, or the seed's tool clearing it by its mtime, is
// noticed within a second, not a heartbeat later.
func (h *Held) heartbeat() {
	defer close(h.done)
	t := time.NewTicker(h.o.Heartbeat)
	defer t.Stop()
	self := time.NewTicker(selfCheck)
	defer self.Stop()
	for {
		check := h.touch
		select {
		case <-h.stop:
			return
		case <-t.C:
		case <-self.C:
			if !h.moved() {
				continue
			}
			check = h.check
		}
		if err := check(); err != nil {
			if errors.Is(err, errNotOurs) {
				h.markLost(err)
				return
			}
			h.o.Logger.Warn("GPU lock heartbeat failed; retrying at the next one", "path", h.o.Path, "error", err)
		}
	}
}

// underGuard runs fn with the guard held, waiting for it at most
// clearGuardWait.
func (h *Held) underGuard(fn func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), clearGuardWait)
	defer cancel()
	g, err := takeGuard(ctx, h.o.Path)
	if err != nil {
		return err
	}
	defer g.release()
	return fn()
}

// moved reports whether the lock file is gone or another file than the one
// this holder wrote.
func (h *Held) moved() bool {
	fi, err := os.Lstat(h.o.Path)
	h.mu.Lock()
	defer h.mu.Unlock()
	return err != nil || h.file == nil || !os.SameFile(fi, h.file)
}

// check reads the lock under the guard and reports errNotOurs if it is no
// longer this holder's; if it still is (a record put back by a clearing
// that found it alive), that file is the one to watch.
func (h *Held) check() error {
	return h.underGuard(func() error {
		if _, err := h.ours(); err != nil {
			return err
		}
		fi, err := os.Lstat(h.o.Path)
		h.mu.Lock()
		h.file = fi
		h.mu.Unlock()
		return err
	})
}

// errNotOurs says the lock file no longer holds our record.
var errNotOurs = errors.New("the lock file no longer holds this process's record")

// ours reads the lock under the guard and checks it is still ours.
func (h *Held) ours() (*Status, error) {
	st, err := readStatus(h.o.Path)
	if err != nil {
		return nil, err
	}
	return st, h.isOurs(st)
}

// isOurs says whether st, as read, is this holder's record.
func (h *Held) isOurs(st *Status) error {
	if st.State == StateFree {
		return fmt.Errorf("%w: it was removed", errNotOurs)
	}
	if st.Info == nil || st.Info.Token != h.info.Token || st.Info.PID != h.info.PID {
		return fmt.Errorf("%w: it now names %s", errNotOurs, st.Holder())
	}
	return nil
}

// touch is one heartbeat: set the lock file's mtime to now if it is ours.
// The file is read and touched through one open file, so that the file
// touched is the one found to be ours, whatever the path names meanwhile.
func (h *Held) touch() error {
	return h.underGuard(func() error {
		var f *os.File
		err := osfile.RetrySharing(func() (err error) {
			f, err = osfile.OpenToTouch(h.o.Path)
			return err
		})
		if errors.Is(err, fs.ErrNotExist) {
			return h.isOurs(&Status{State: StateFree})
		}
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := readStatusFrom(f, h.o.Path)
		if err != nil {
			return err
		}
		if err := h.isOurs(st); err != nil {
			return err
		}
		return osfile.Touch(f, time.Now())
	})
}

// NoteChild notes the process group of the job run under the lock in the
// holder's liveness file, so that the lock stays alive while that group
// runs even if this process is killed and the job's processes closed the
// liveness file. It is one write, with no guard and no new file: call it
// the moment the job starts. RecordChild puts the group into the record
// itself, where status shows it.
func (h *Held) NoteChild(pgid int) error {
	return h.live.note(pgid)
}

// RecordChild writes the process group of the job run under the lock into
// the record (childPgid), so that the lock stays alive while that group
// runs even if this process is killed. It also counts as a heartbeat.
func (h *Held) RecordChild(pgid int) error {
	return h.underGuard(func() error {
		if _, err := h.ours(); err != nil {
			return err
		}
		h.mu.Lock()
		next := *h.info
		next.ChildPGID = pgid
		h.mu.Unlock()
		if err := replaceRecord(h.o.Path, &next); err != nil {
			return err
		}
		fi, _ := os.Lstat(h.o.Path)
		h.mu.Lock()
		h.info, h.file = &next, fi
		h.mu.Unlock()
		return nil
	})
}

// releaseGuardWait bounds how long Release waits for the guard. Release
// must happen even if a stopped process holds the guard; without it,
// removal is still safe (rename, re-read, compare), only not serialized.
const releaseGuardWait = 5 * time.Second

// Release stops the heartbeat and removes the lock file if it still holds
// this lock's pid and token; a lock that is no longer ours is left alone.
// It is safe to call more than once; later calls do nothing.
func (h *Held) Release() error {
	if !h.stopHeartbeat() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseGuardWait)
	defer cancel()
	g, gerr := takeGuard(ctx, h.o.Path)
	if gerr != nil {
		h.o.Logger.Warn("releasing GPU lock without its guard", "path", h.o.Path, "error", gerr)
	}
	// The liveness file goes first, under the guard: once the record is
	// gone, a liveness file still locked means a job still runs (see
	// sweep), and the next holder must not have to wait for it. A judge
	// without the guard that looks in between finds the record with its
	// liveness file gone and this process alive: held.
	h.live.release()
	removed, err := h.removeRecord()
	// The guard goes before the log line: the next holder, woken by the
	// removal, is waiting for it.
	g.release()
	if removed {
		h.o.Logger.Info("released GPU lock", "path", h.o.Path)
	}
	return err
}

// stopHeartbeat marks the lock released and stops its heartbeat; false if
// it already was.
func (h *Held) stopHeartbeat() bool {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return false
	}
	h.released = true
	h.mu.Unlock()
	close(h.stop)
	<-h.done
	return true
}

// removeGuarded removes the record if it is still ours, then the liveness
// lock. Call with the guard held (or not to be had).
func (h *Held) removeGuarded() error {
	// The liveness lock goes after the record, on every path.
	defer h.live.release()
	_, err := h.removeRecord()
	return err
}

// removeRecord removes the record if it is still ours, reporting whether it
// did. Call with the guard held (or not to be had), then release the
// liveness lock.
func (h *Held) removeRecord() (bool, error) {
	st, err := h.ours()
	if errors.Is(err, errNotOurs) {
		h.o.Logger.Warn("GPU lock was no longer ours at release; left it alone", "path", h.o.Path, "reason", err)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lock: release: %w", err)
	}
	if err := removeIfSame(h.o.Path, st); err != nil {
		return false, fmt.Errorf("lock: release: %w", err)
	}
	return true, nil
}
