package lock

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpuexec/gpuexec/internal/osfile"
)

// Errors that callers tell apart with errors.Is.
var (
	// ErrInvalid is wrapped by errors about Options (see OptionError).
	ErrInvalid = errors.New("lock: invalid options")
	// ErrHeld says a live holder has the lock: from Clear without force,
	// and in the *WaitError of a TryAcquire that met contention.
	ErrHeld = errors.New("lock: held by a live holder")
	// ErrRefused is in the *WaitError of a TryAcquire that found the
	// locks it needs free but Options.Admit did not admit enough of them
	// (WaitError.Why says why).
	ErrRefused = errors.New("lock: free, but not admitted")
	// ErrNotLock is returned (wrapped in a *fs.PathError) when the file
	// at the lock path is neither a lock record nor a partly written or
	// damaged one: the lock path names some other file, which is never
	// cleared, overwritten or removed.
	ErrNotLock = errors.New("not a lock file")
	// ErrNotRegular is returned (wrapped in a *fs.PathError) when the
	// lock path is something other than a regular file: a folder, a
	// symbolic link, a FIFO, a device. Nothing follows, writes through or
	// removes such a path.
	ErrNotRegular = osfile.ErrNotRegular
	// ErrUnreachable is wrapped by errors of remote backends that could
	// not reach their service within its dial timeout.
	ErrUnreachable = errors.New("lock service unreachable")
	// ErrNoFolder is returned by Inspect (wrapped in a *fs.PathError
	// naming the folder) when the lock's folder does not exist: no lock
	// was ever taken at that path (or its folder was removed), which
	// more often means a mistyped path, or another TMPDIR than the jobs',
	// than a free GPU. Nothing is created to find it.
	ErrNoFolder = errors.New("lock: the lock's folder does not exist")
)

// WaitError says the lock was not had: Acquire's context ended first
// (Err is ctx's error: errors.Is(err, context.DeadlineExceeded) tells a
// deadline from a cancellation), or TryAcquire met contention (Err is
// ErrHeld). It carries the locks as last seen, so that nobody has to look
// again to say who was in the way.
type WaitError struct {
	// Seen are the locks waited for as last seen: the lock, or each
	// device in Options.Devices' order (Status.Device names it). A lock
	// left free but for earlier arrivals in the queue is StateFree.
	Seen []*Status
	// Waited is how long the caller waited.
	Waited time.Duration
	// Why is what Options.Admit last said kept free locks from being
	// taken; empty when they were held.
	Why string
	Err error
}

// Holder is the first lock seen that is not free (nil when none was).
func (e *WaitError) Holder() *Status {
	for _, st := range e.Seen {
		if st != nil && st.State != StateFree {
			return st
		}
	}
	return nil
}

// Holders names who was in the way, for messages: "channels/ep12 (pid
// 4242)", "another job" when the lock was free but earlier arrivals were
// queued for it, or for devices "GPU 0: channels/ep12 (pid 4242), GPU 1:
// free".
func (e *WaitError) Holders() string { return holders(e.Seen) }

func (e *WaitError) Error() string {
	switch {
	case errors.Is(e.Err, ErrHeld):
		return "lock: held by " + e.Holders()
	case errors.Is(e.Err, ErrRefused):
		return "lock: free but not admitted: waiting for " + e.Why
	case e.Why != "":
		return fmt.Sprintf("lock: gave up after %s: waiting for %s: %v", fmtAge(e.Waited), e.Why, e.Err)
	}
	return fmt.Sprintf("lock: gave up after %s: held by %s: %v", fmtAge(e.Waited), e.Holders(), e.Err)
}

func (e *WaitError) Unwrap() error { return e.Err }

// holders names who is in the way in seen, for messages (see
// WaitError.Holders).
func holders(seen []*Status) string {
	plain, devices := splitSeen(seen)
	if plainHeld(plain) {
		if len(devices) > 0 {
			return plain.Holder() + ", a job on every GPU"
		}
		return plain.Holder()
	}
	parts := make([]string, 0, len(devices))
	for _, st := range devices {
		who := "free"
		if st.State != StateFree {
			who = st.Holder()
		} else if plain != nil {
			continue // a plain lock's devices: only those held
		}
		parts = append(parts, "GPU "+st.Device+": "+who)
	}
	if len(parts) == 0 {
		return "another job"
	}
	return strings.Join(parts, ", ")
}
