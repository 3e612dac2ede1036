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
	"sort"
	"strconv"
	"strings"
	"time"
)

// TicketSuffix names a waiter's ticket beside the lock:
// "<lock>.ticket-<seq>", seq a 20-digit arrival number. Waiters are served
// in seq order: while a live ticket with a lower seq exists, a waiter does
// not take a free lock. A waiter holds an exclusive kernel lock on its
// ticket for as long as it waits, so the ticket of a waiter that died is
// recognised (its lock is free) and pruned by the next waiter that looks.
// Processes that know nothing of tickets (the seed's Node tool) are not
// queued: when they hold the lock they are simply waited for, and they may
// take a free lock before the head of the queue does.
const TicketSuffix = ".ticket-"

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
	// Alive is false for a ticket whose waiter is gone (not yet pruned).
	Alive bool `json:"alive"`
}

// ticketRecord is a ticket's content.
type ticketRecord struct {
	PID   int    `json:"pid"`
	Owner string `json:"owner"`
	Slug  string `json:"slug"`
	Host  string `json:"host,omitempty"`
	Since string `json:"since"`
}

// ticket is this process's place in the queue.
type ticket struct {
	seq     uint64
	path    string
	f       *os.File
	touched time.Time
}

func ticketPath(lockPath string, seq uint64) string {
	return fmt.Sprintf("%s%s%020d", lockPath, TicketSuffix, seq)
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
	prefix := filepath.Base(lockPath) + TicketSuffix
	var out []ticketEntry
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		seq, err := strconv.ParseUint(name[len(prefix):], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, ticketEntry{seq: seq, path: filepath.Join(filepath.Dir(lockPath), name)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out, nil
}

// nextSeq hands out arrival numbers from a counter kept in the guard file,
// never below a ticket that exists (the guard file may have been deleted).
// Call with the guard held.
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
	if k := len(existing); k > 0 && existing[k-1].seq > seq {
		seq = existing[k-1].seq
	}
	seq++
	binary.LittleEndian.PutUint64(b[:], seq)
	if _, err := g.f.WriteAt(b[:], 0); err != nil {
		return 0, err
	}
	return seq, nil
}

// takeTicket joins the queue. Call with the guard held.
func takeTicket(g *guard, o Options) (*ticket, error) {
	existing, err := listTickets(o.Path)
	if err != nil {
		return nil, err
	}
	seq, err := g.nextSeq(existing)
	if err != nil {
		return nil, err
	}
	p := ticketPath(o.Path, seq)
	f, err := createShared(p)
	if err != nil {
		return nil, err
	}
	ok, err := tryLockFile(f)
	if err == nil && !ok {
		err = errors.New("ticket locked by another process")
	}
	if err == nil {
		b, _ := json.Marshal(ticketRecord{
			PID: os.Getpid(), Owner: o.Owner, Slug: o.Slug, Host: hostName(),
			Since: time.Now().UTC().Format(isoMillis),
		})
		_, err = f.Write(b)
	}
	if err != nil {
		f.Close()
		os.Remove(p)
		return nil, &fs.PathError{Op: "queue", Path: p, Err: err}
	}
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
	os.Chtimes(t.path, now, now)
}

// drop leaves the queue. Safe on nil and more than once.
func (t *ticket) drop() {
	if t == nil || t.f == nil {
		return
	}
	// Closed before it is removed (Windows cannot remove an open file);
	// in between, a waiter may prune it as dead, which is the same.
	unlockFile(t.f)
	t.f.Close()
	t.f = nil
	os.Remove(t.path)
}

// ticketAlive reports whether a waiter holds the ticket's kernel lock.
func ticketAlive(path string) bool {
	f, err := openShared(path)
	if err != nil {
		return false
	}
	defer f.Close()
	ok, err := tryLockShared(f)
	if err != nil {
		return true
	}
	if ok {
		unlockFile(f)
	}
	return !ok
}

// ahead counts the tickets before seq (all of them for seq 0). The first
// ones, up to the first live ticket, are checked, and pruned if their
// waiter is gone or has not shown life for longer than stale; the ones
// behind a live ticket are counted as they are: nobody behind it is served
// before it, and each is checked when it comes first. That keeps the work
// under the guard the same for any length of queue. Call with the guard
// held.
func ahead(lockPath string, seq uint64, stale time.Duration) (int, error) {
	tickets, err := listTickets(lockPath)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range tickets {
		if seq != 0 && t.seq >= seq {
			break
		}
		if n == 0 {
			fi, err := os.Stat(t.path)
			if err != nil {
				continue
			}
			if !ticketAlive(t.path) || time.Since(fi.ModTime()) > stale {
				os.Remove(t.path)
				continue
			}
		}
		n++
	}
	return n, nil
}

// readQueue lists the waiters in arrival order without changing anything.
func readQueue(lockPath string) ([]Waiter, error) {
	tickets, err := listTickets(lockPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Waiter
	pos := 0
	for _, t := range tickets {
		b, err := readAllLimited(t.path)
		if err != nil {
			continue
		}
		var rec ticketRecord
		json.Unmarshal(b, &rec)
		w := Waiter{Seq: t.seq, PID: rec.PID, Owner: rec.Owner, Slug: rec.Slug, Host: rec.Host, Since: rec.Since,
			Alive: ticketAlive(t.path)}
		if w.Alive {
			pos++
			w.Position = pos
		}
		out = append(out, w)
	}
	return out, nil
}
