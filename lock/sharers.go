package lock

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
	"github.com/gpuexec/gpuexec/internal/proc"
)

// The sharers of a lock held in shared mode (see share.go), as read from
// their sidecars: who they are, their budgets, which are alive.

// maxShareSize bounds what is read of a sidecar; a real one is a few
// hundred bytes.
const maxShareSize = 4 << 10

// Sharer is one holder of a lock held in shared mode, as its sidecar says.
// What another process wrote there is shown escaped and never becomes a
// path.
type Sharer struct {
	PID       int    `json:"pid"`
	Owner     string `json:"owner"`
	Slug      string `json:"slug"`
	Host      string `json:"host,omitempty"`
	PIDStart  int64  `json:"pidStart,omitempty"`
	ChildPGID int    `json:"childPgid,omitempty"`
	// ChildStart is when its job's group leader started (see
	// Info.ChildStart).
	ChildStart int64 `json:"childStart,omitempty"`
	// Gone says the sharer's gpuexec is gone (its sidecar's kernel lock
	// is free) while processes of its job's group still run: its budget
	// still counts, and it keeps the lock held, until they end.
	Gone bool `json:"gone,omitempty"`
	// MiB is its budget of video memory, in MiB; -1 when its sidecar
	// cannot be read (then nothing more may join the lock).
	MiB int64 `json:"vramMiB"`
	// Since is when it joined (UTC ISO-8601 with milliseconds).
	Since string `json:"since"`
	// UsedMiB is the video memory its job was last measured using (0:
	// not measured yet); Over says that was more than its budget allows
	// (see Held.NoteUse).
	UsedMiB int64 `json:"usedMiB,omitempty"`
	Over    bool  `json:"over,omitempty"`
	// Lock is the token of the record it shares.
	Lock string `json:"lock,omitempty"`
	// Deadline is when its job is stopped at the latest (its
	// Options.HoldLimit from Since; UTC ISO-8601), "" when it has none.
	// Waiters that backfill count on it (see Ahead.HeadStart).
	Deadline string `json:"deadline,omitempty"`
	// Unattributed says why the processes its sidecar names are not
	// taken for its own, "" when they are: they are not its file owner's,
	// or the file may not be its owner's word. Such a sharer
	// still counts (its budget, and it keeps the lock held while it
	// lives), but no process's memory is moved from "in use by others"
	// into its budget, nor named as its job's.
	Unattributed string `json:"unattributed,omitempty"`
	// Unopened says this is a file at a sidecar's name that this user
	// may not open: a sharer whose budget (MiB, -1) and everything else
	// is unknown. It is not part of a sharer's JSON.
	Unopened bool `json:"-"`
	// mtime is its sidecar's: its gpuexec's last heartbeat (see
	// heldFile.touch) or write.
	mtime time.Time
}

// Budget is the sum of the sharers' budgets; known is false when a
// sidecar could not be read.
func Budget(sharers []Sharer) (mib int64, known bool) {
	for _, s := range sharers {
		if s.MiB < 0 {
			return mib, false
		}
		mib += s.MiB
	}
	return mib, true
}

// Candidate is a device a sharer may take, for Options.AdmitShare: free
// (no sharers), or held in shared mode by Sharers.
type Candidate struct {
	// Device is the device's name (Options.Devices), "" for a single
	// lock.
	Device string
	// Sharers are the live sharers on it, as read under its guard.
	Sharers []Sharer
	// Ahead, when set, is the head of the queue this sharer would start
	// ahead of (Options.Backfill): admit it only when, besides fitting,
	// Ahead.Passes.
	Ahead *Ahead
}

// parseSharer reads a sidecar's content defensively: bounded, any JSON
// object, strings kept as written (shown escaped), figures that cannot be
// budgets read as unknown.
func parseSharer(b []byte) (Sharer, bool) {
	var s Sharer
	if len(b) == 0 || len(b) > maxShareSize || json.Unmarshal(b, &s) != nil {
		return Sharer{MiB: -1}, false
	}
	if s.MiB <= 0 || s.MiB > math.MaxInt32 {
		s.MiB = -1
	}
	if s.PID < 0 || s.PID > math.MaxInt32 {
		s.PID = 0
	}
	if s.ChildPGID < 0 || s.ChildPGID > math.MaxInt32 {
		s.ChildPGID = 0
	}
	if s.ChildStart < 0 || s.ChildPGID == 0 {
		s.ChildStart = 0
	}
	s.Gone = false      // said by the kernel's lock, not by the file
	s.Unattributed = "" // said by vouch, not by the file
	if s.UsedMiB < 0 {
		s.UsedMiB = 0
	}
	if !validToken(s.Lock) {
		s.Lock = ""
	}
	if !validTime(s.Deadline) {
		s.Deadline = ""
	}
	return s, true
}

// listSharers reads the live sharers beside the lock at lockPath: those
// whose sidecar's kernel lock is held, then those whose gpuexec is gone
// while their job's group still runs on this host (Gone), each in name
// order; with prune, the dead ones' sidecars are removed. A live sidecar
// whose processes are not attributed to it (Unattributed) is listed as
// any other. A file at a sidecar's name that cannot be opened is a sharer
// whose budget is unknown while its mtime is fresh (see outlived, with
// stale), and is then left out. Call with the lock's guard held to count
// them (sidecars are written whole under it); without, a sidecar caught
// being written is read again.
func listSharers(lockPath string, stale time.Duration, prune bool) []Sharer {
	dir, base := filepath.Dir(lockPath), filepath.Base(lockPath)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var sharers, gone []Sharer
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), base+shareSuffix)
		if !ok || !validToken(rest) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		s, live, unopened := readSharer(path, stale)
		switch {
		case live && s.Gone:
			gone = append(gone, s)
		case live:
			sharers = append(sharers, s)
		case unopened:
			// There, but not this user's to open (another user's
			// mode; EMFILE): a sharer that cannot be told, whose
			// budget is unknown (nothing more may join), while its
			// mtime is fresh; never one that keeps the lock held
			// (see keepers): a live sharer holds the record's
			// liveness lock, which says so.
			if fi, err := os.Lstat(path); err == nil && !outlived(time.Since(fi.ModTime()), stale) {
				sharers = append(sharers, Sharer{MiB: -1, Unopened: true})
			}
		case prune:
			removeDeadLiveFile(path)
		}
	}
	return append(sharers, gone...)
}

// readSharer reads the sidecar at path: live when its kernel lock is held,
// or (Gone) when it is free but the job's group it names still runs here;
// unopened when it is there but cannot be opened (EACCES, EMFILE, ENFILE:
// never taken for a dead one's);
// a live one whose processes vouch does not take for its own says why in
// Unattributed. A Gone one that vouch refuses (a member's plant naming
// another user's job, or a real sharer whose job took root with sudo)
// lives only while its sidecar is fresh: its gpuexec touched it at each
// heartbeat, and nobody keeps a card held longer than stale after that
// without running something.
func readSharer(path string, stale time.Duration) (s Sharer, live, unopened bool) {
	f, err := osfile.OpenRegular(path, false)
	if err != nil {
		return Sharer{}, false, !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, osfile.ErrNotRegular)
	}
	defer f.Close()
	ok, err := osfile.TryLockShared(f)
	if err != nil {
		return Sharer{}, false, false
	}
	if ok {
		osfile.Unlock(f)
	}
	for range 3 {
		b, err := io.ReadAll(io.LimitReader(io.NewSectionReader(f, 0, maxShareSize+1), maxShareSize+1))
		var good bool
		if s, good = parseSharer(trimJSON(b)); good || err != nil {
			break
		}
		time.Sleep(time.Millisecond) // being written (read without the guard)
	}
	if fi, err := f.Stat(); err == nil {
		s.mtime = fi.ModTime()
	}
	if !ok {
		s.Unattributed = vouch(f, s)
		return s, true, false
	}
	// Its gpuexec is gone: the sharer lives on while its job does. Only
	// a group whose start is known counts (see Info.ChildStart).
	if s.ChildPGID > 0 && s.ChildStart > 0 && sameHost(s.Host) && proc.GroupAliveSince(s.ChildPGID, s.ChildStart) {
		s.Gone = true
		s.Unattributed = vouch(f, s)
		if s.Unattributed != "" && outlived(time.Since(s.mtime), stale) {
			return Sharer{}, false, false
		}
		return s, true, false
	}
	return Sharer{}, false, false
}

// sharersLeft says, for a reason, which sharers keep a shared lock whose
// record's holder is gone: "the jobs of its sharers still run:
// channels/tts (pid 4242), reels/tts (pid 4300, gone)".
func sharersLeft(sharers []Sharer) string {
	names := make([]string, len(sharers))
	for i, sh := range sharers {
		names[i] = sh.Name()
	}
	return "the jobs of its sharers still run: " + strings.Join(names, ", ")
}

// Name names the sharer as Info.Holder names a holder: "channels/tts
// (pid 4242)", with ", gone; its job still runs" inside the parentheses
// for a sharer whose gpuexec is gone.
func (sh Sharer) Name() string {
	h := sh.holder()
	who := h.Holder()
	if sh.Gone {
		who = strings.TrimSuffix(who, ")") + ", gone; its job still runs)"
	}
	return who
}

func trimJSON(b []byte) []byte { return []byte(strings.Trim(string(b), jsonSpace)) }
