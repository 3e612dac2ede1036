package lock

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
	"github.com/gpuexec/gpuexec/internal/proc"
)

// ticketSuffix names a waiter's ticket beside the lock:
// "<lock>.ticket-<seq>", seq a 20-digit arrival number. Waiters are served
// in seq order: while a live ticket with a lower seq exists, a waiter does
// not take a free lock. A waiter holds an exclusive kernel lock on its
// ticket for as long as it waits, so the ticket of a waiter that died is
// recognised (its lock is free) and pruned by the next waiter that looks.
// Processes that know nothing of tickets (the seed's Node tool) are not
// queued: when they hold the lock they are simply waited for, and they may
// take a free lock before the head of the queue does.
const ticketSuffix = ".ticket-"

// ticketRecord is a ticket's content. Another user's process may have
// written it: it is only ever read into this struct, and its strings are
// compared and shown (escaped), never used as paths.
type ticketRecord struct {
	PID int `json:"pid"`
	// PIDStart is the waiter's start time, as Info.PIDStart (0: a ticket
	// of an older gpuexec), so that status tells its process from
	// another with its pid.
	PIDStart int64  `json:"pidStart,omitempty"`
	Owner    string `json:"owner"`
	Slug     string `json:"slug"`
	Host     string `json:"host,omitempty"`
	Since    string `json:"since"`
	// Locks are the base names of the lock files the waiter may take:
	// the lock itself, or the devices of a device set. Waiters order
	// only those they compete with (see queue.rival).
	Locks []string `json:"locks,omitempty"`
	// Share says the waiter will share its device (Options.ShareMiB),
	// with a budget of VRAMMiB and keeping ReserveMiB of it free
	// (Options.ShareReserve; 0: its default); Whole that it takes its
	// device alone. A sharer behind reads them to know when this waiter
	// could start (see backfillAhead); a ticket with neither (an older
	// gpuexec's) says nothing of its need.
	Share      bool  `json:"share,omitempty"`
	Whole      bool  `json:"whole,omitempty"`
	VRAMMiB    int64 `json:"vramMiB,omitempty"`
	ReserveMiB int64 `json:"reserveMiB,omitempty"`
}

// maxTicketSize bounds what is read of a ticket; a real one is a few
// hundred bytes.
const maxTicketSize = 4 << 10

// readTicket reads the ticket at path, refusing anything but a regular
// file (see osfile.OpenRegular) and anything longer than a ticket can be.
func readTicket(path string) (ticketRecord, error) {
	var rec ticketRecord
	f, err := osfile.OpenRegular(path, false)
	if err != nil {
		return rec, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTicketSize+1))
	switch {
	case err != nil:
		return rec, err
	case len(b) > maxTicketSize:
		return rec, fmt.Errorf("%s: larger than a ticket", path)
	case len(b) == 0:
		return rec, errEmptyTicket
	}
	return rec, json.Unmarshal(b, &rec)
}

// errEmptyTicket is a ticket with no record yet: its waiter creates it,
// locks it and writes its record at once, so a reader may see it empty in
// between.
var errEmptyTicket = errors.New("ticket has no record yet")

// ticketWriteGrace bounds how long Inspect reads a live, empty ticket
// again before it shows the waiter without a name.
const ticketWriteGrace = 100 * time.Millisecond

// ticket is this process's place in the queue.
type ticket struct {
	seq     uint64
	path    string
	f       *os.File
	touched time.Time
}

func ticketPath(lockPath string, seq uint64) string {
	return fmt.Sprintf("%s%s%020d", lockPath, ticketSuffix, seq)
}

// ticketEntry is a ticket file found in the lock's folder.
type ticketEntry struct {
	seq  uint64
	path string
}

// listTickets returns the tickets beside the lock in arrival order.
func listTickets(lockPath string) ([]ticketEntry, error) {
	ents, err := os.ReadDir(filepath.Dir(lockPath))
	if err != nil {
		return nil, err
	}
	prefix := filepath.Base(lockPath) + ticketSuffix
	var out []ticketEntry
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		// Exactly the 20 digits ticketPath writes: no other lock's
		// file ("gpu.lock.ticket-5.lock") is taken for a ticket.
		digits := name[len(prefix):]
		if len(digits) != 20 || strings.Trim(digits, "0123456789") != "" {
			continue
		}
		seq, err := strconv.ParseUint(digits, 10, 64)
		if err != nil || seq == 0 || seq >= maxSeq {
			continue
		}
		out = append(out, ticketEntry{seq: seq, path: filepath.Join(filepath.Dir(lockPath), name)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out, nil
}

// queue is one waiter's view of the queue kept beside a lock (at the queue's path):
// which locks the waiter competes for, and which of the others' tickets
// compete with it. One queue serves a lock and the devices beside it, but
// only waiters that compete for a same lock order each other: a waiter for
// GPU 1 does not wait behind one for GPU 0, nor a --gpus waiter behind one
// for the plain lock.
type queue struct {
	path  string   // the lock path the tickets are named after
	locks []string // the locks this waiter may take
	names []string // their base names, as tickets record them
	// rivals caches, per ticket, whether it competes: a ticket's
	// content is written once, when it is taken.
	rivals map[uint64]bool
}

func newQueue(queuePath string, locks []string) *queue {
	q := &queue{path: queuePath, locks: locks, rivals: map[uint64]bool{}}
	for _, l := range locks {
		q.names = append(q.names, filepath.Base(l))
	}
	return q
}

// rival reports whether the ticket t competes with q's waiter (see
// competes).
func (q *queue) rival(t ticketEntry) bool {
	if r, ok := q.rivals[t.seq]; ok {
		return r
	}
	rec, err := readTicket(t.path)
	r := competes(rec, err, q.names, filepath.Base(q.path))
	if !errors.Is(err, fs.ErrNotExist) {
		q.rivals[t.seq] = r
	}
	return r
}

// competes reports whether a ticket read as rec (or not read: err) waits
// for a lock that one of the locks names would exclude: one of names
// itself, or, since the lock at the queue's path (queueName, its base name)
// stands for every device beside it (see cover.go), that lock when names
// are devices, and any device when names is that lock. A ticket that
// names none (an older gpuexec's, or content that cannot be read) is taken
// to wait for every lock.
func competes(rec ticketRecord, err error, names []string, queueName string) bool {
	if err != nil || len(rec.Locks) == 0 || slices.Contains(names, queueName) {
		return true
	}
	for _, n := range rec.Locks {
		if n == queueName || slices.Contains(names, n) {
			return true
		}
	}
	return false
}

// maxSeq bounds arrival numbers. Numbers come from a counter that a
// process of any user who may write the folder can write, and from ticket
// names: larger ones are ignored, so that no number ever wraps around to
// the front of the queue. At a million tickets a second it lasts 146,000
// years.
const maxSeq = 1 << 62

// counterMax bounds the counter in the guard: one at or above it (never
// reached in use, but any member may write it there) is not used, and the
// tickets alone number the next one. Half of maxSeq, so that tickets
// numbered from such a counter still have numbers left after them.
const counterMax = maxSeq / 2

// errSeqsUsedUp is a queue whose last ticket is numbered maxSeq-1 (put
// there by hand: the counter never gets so far): no number is left that
// sorts after it.
var errSeqsUsedUp = errors.New("the queue's arrival numbers are used up: its last ticket is numbered 2^62-1; nobody may queue until it is gone")

// nextSeq hands out arrival numbers from a counter kept in the guard file,
// never below a ticket that exists (the guard file may have been deleted).
// Where this process may not write the guard (see osfile.OpenGuard), the number is
// the last ticket's plus one. A counter at or above counterMax (any value a
// member may write there) is not used: the tickets alone number the next
// one, so that every ticket is seen (listTickets) and sorts after those
// before it. Call with the guard held.
func (g *guard) nextSeq(existing []ticketEntry) (uint64, error) {
	var b [8]byte
	n, err := g.f.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	var seq uint64
	if n == len(b) {
		seq = binary.LittleEndian.Uint64(b[:])
	}
	if seq >= counterMax {
		seq = 0
	}
	if k := len(existing); k > 0 && existing[k-1].seq > seq {
		seq = existing[k-1].seq
	}
	if seq >= maxSeq-1 {
		return 0, errSeqsUsedUp
	}
	seq++
	if !g.writable {
		return seq, nil
	}
	binary.LittleEndian.PutUint64(b[:], seq)
	if _, err := g.f.WriteAt(b[:], 0); err != nil {
		return 0, err
	}
	return seq, nil
}

// takeTicket joins the queue q. Call with the guard held.
func takeTicket(g *guard, o Options, q *queue) (*ticket, error) {
	existing, err := listTickets(o.Path)
	if err != nil {
		return nil, err
	}
	seq, err := g.nextSeq(existing)
	if err != nil {
		return nil, err
	}
	p := ticketPath(o.Path, seq)
	f, err := osfile.CreateExcl(p, osfile.Locked)
	if err != nil {
		return nil, err
	}
	err = lockNew(f, "ticket")
	if err == nil {
		selfStartOnce.Do(findSelfStart)
		b, _ := json.Marshal(ticketRecord{
			PID: os.Getpid(), PIDStart: selfStart, Owner: o.Owner, Slug: o.Slug, Host: proc.HostName(),
			Since: time.Now().UTC().Format(isoMillis), Locks: q.names,
			Share: o.ShareMiB > 0, Whole: o.ShareMiB <= 0, VRAMMiB: max(o.ShareMiB, 0),
			ReserveMiB: max(o.ShareReserve, 0),
		})
		_, err = f.Write(b)
	}
	if err != nil {
		f.Close()
		os.Remove(p)
		return nil, &fs.PathError{Op: "queue", Path: p, Err: err}
	}
	q.rivals[seq] = true
	return &ticket{seq: seq, path: p, f: f, touched: time.Now()}, nil
}

// exists reports whether the ticket is still in the folder (a waiter
// stopped for longer than Options.Stale has its ticket pruned).
func (t *ticket) exists() bool {
	_, err := os.Stat(t.path)
	return err == nil
}

// touch marks the ticket as belonging to a waiter that is still running,
// at most once every period: its mtime only has to stay younger than
// Options.Stale.
func (t *ticket) touch(period time.Duration) {
	if t == nil {
		return
	}
	now := time.Now()
	if now.Sub(t.touched) < period {
		return
	}
	t.touched = now
	osfile.Touch(t.f, now)
}

// drop leaves the queue. Safe on nil and more than once.
func (t *ticket) drop() {
	if t == nil || t.f == nil {
		return
	}
	// Closed before it is removed (Windows cannot remove an open file);
	// in between, a waiter may prune it as dead, which is the same.
	osfile.Unlock(t.f)
	t.f.Close()
	t.f = nil
	os.Remove(t.path)
}

// ticketAlive reports whether a waiter holds the ticket's kernel lock, or
// may: a ticket that is there but cannot be opened cannot be told, and is
// taken to be alive (see ticketState).
func ticketAlive(path string) bool {
	return ticketState(path) != ticketDead
}

// What a probe of a ticket's kernel lock tells.
const (
	ticketDead     = iota // gone, no regular file, or its lock is free
	ticketHeld            // a waiter holds its lock
	ticketUnopened        // there, but it cannot be opened (EACCES: another user's mode; EMFILE, ENFILE: no descriptor left)
)

// ticketState probes the ticket at path. An unopened ticket says nothing
// of its waiter: ahead lets it go by its mtime alone (see outlived), where
// a held one goes only when its waiter has not touched it for longer than
// Options.Stale (a stopped waiter); a clock stepped back leaves held
// tickets' mtimes in the future, and their waiters keep their places.
func ticketState(path string) int {
	f, err := osfile.OpenRegular(path, false)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, osfile.ErrNotRegular) {
			return ticketDead
		}
		return ticketUnopened
	}
	defer f.Close()
	ok, err := osfile.TryLockShared(f)
	if err != nil {
		return ticketUnopened
	}
	if ok {
		osfile.Unlock(f)
		return ticketDead
	}
	return ticketHeld
}

// ahead counts the live tickets before seq (all of them for seq 0) that
// compete with q. The first ones, up to the first live rival, are checked,
// and pruned if their waiter is gone or has not shown life for longer than
// stale (one that cannot be opened also when its mtime is far in the
// future: see ticketState); the rivals behind a live one are counted as
// they are: nobody
// behind it is served before it, and each is checked when it comes first.
// That keeps the work under the guard the same for any length of queue.
// Call with the guard held.
func ahead(q *queue, seq uint64, stale time.Duration) (int, error) {
	tickets, err := listTickets(q.path)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range tickets {
		if seq != 0 && t.seq >= seq {
			break
		}
		if n > 0 {
			if q.rival(t) {
				n++
			}
			continue
		}
		fi, err := os.Lstat(t.path)
		if err != nil || !fi.Mode().IsRegular() {
			continue // gone, or no ticket of anyone's: not touched
		}
		age := time.Since(fi.ModTime())
		state := ticketState(t.path)
		if state == ticketDead || state == ticketHeld && age > stale || state == ticketUnopened && outlived(age, stale) {
			os.Remove(t.path)
			delete(q.rivals, t.seq)
			continue
		}
		if q.rival(t) {
			n++
		}
	}
	return n, nil
}

// readQueue lists the waiters for any of locks (nil: every waiter) in
// arrival order, without changing anything. Positions count the live ones,
// and their processes on this host are told (see processOf).
func readQueue(queuePath string, locks []string) ([]Waiter, error) {
	tickets, err := listTickets(queuePath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := newQueue(queuePath, locks).names
	var out []Waiter
	pos := 0
	for _, t := range tickets {
		rec, err := readTicket(t.path)
		alive := ticketAlive(t.path)
		for end := time.Now().Add(ticketWriteGrace); alive && errors.Is(err, errEmptyTicket) && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
			rec, err = readTicket(t.path)
		}
		if errors.Is(err, fs.ErrNotExist) || (locks != nil && !competes(rec, err, names, filepath.Base(queuePath))) {
			continue
		}
		w := Waiter{Seq: t.seq, PID: rec.PID, Owner: rec.Owner, Slug: rec.Slug, Host: rec.Host, Since: rec.Since,
			Locks: rec.Locks, Alive: alive}
		if w.Alive {
			pos++
			w.Position = pos
			if sameHost(w.Host) {
				w.Process = processOf(w.PID, rec.PIDStart, osProber{lockPath: queuePath})
			}
		}
		out = append(out, w)
	}
	return out, nil
}
