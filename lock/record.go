package lock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gpuexec/gpuexec/internal/escape"
	"github.com/gpuexec/gpuexec/internal/proc"
)

// maxRecordSize bounds how much of a lock file is read. A real record is a
// few hundred bytes; anything larger is treated as unparseable content.
const maxRecordSize = 64 << 10

// isoMillis is the layout of JavaScript's Date.prototype.toISOString, which
// the seed's Node tool writes into acquiredAt.
const isoMillis = "2006-01-02T15:04:05.000Z"

// Holder names the holder the way log lines and messages do:
// "channels/ep12 (pid 4242)".
func (i *Info) Holder() string {
	if i == nil {
		return "an unknown holder"
	}
	owner, slug := escape.Text(i.Owner), escape.Text(i.Slug)
	if owner == "" {
		owner = "?"
	}
	if slug == "" {
		slug = "?"
	}
	s := fmt.Sprintf("%s/%s (pid %d", owner, slug, i.PID)
	if i.Host != "" && i.Host != proc.HostName() {
		s += " on " + escape.Text(i.Host)
	}
	return s + ")"
}

// Acquired parses AcquiredAt. The zero time is returned when it is not a
// valid timestamp.
func (i *Info) Acquired() time.Time { return parseStamp(i.AcquiredAt) }

// DeadlineTime parses Deadline; the zero time when there is none.
func (i *Info) DeadlineTime() time.Time { return parseStamp(i.Deadline) }

// parseStamp parses a time as records, sidecars and tickets hold them
// (RFC 3339); the zero time when s is none.
func parseStamp(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// validTime reports whether s is a time as AcquiredAt and Deadline hold
// them (RFC 3339), and short enough for a log line.
func validTime(s string) bool {
	if len(s) > 40 {
		return false
	}
	_, err := time.Parse(time.RFC3339Nano, s)
	return err == nil
}

// errBadRecord is wrapped by every parse failure.
var errBadRecord = errors.New("not a valid lock record")

// parseRecord decodes a lock file's content. It accepts any JSON object whose
// five seed fields have the seed's types, ignoring unknown fields; it rejects
// empty content, other JSON, wrong types and pids that cannot name a process.
func parseRecord(b []byte) (*Info, error) {
	b = bytes.Trim(b, jsonSpace)
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", errBadRecord)
	}
	if len(b) > maxRecordSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", errBadRecord, maxRecordSize)
	}
	// Keys are matched exactly, as JavaScript does (encoding/json alone
	// would also take "PID" for "pid"): gpuexec and the seed's tool must
	// read the same record from the same bytes.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadRecord, err)
	}
	if fields == nil {
		return nil, fmt.Errorf("%w: null", errBadRecord)
	}
	var info Info
	for key, dst := range map[string]any{
		"pid": &info.PID, "acquiredAt": &info.AcquiredAt, "owner": &info.Owner, "slug": &info.Slug,
		"token": &info.Token, "host": &info.Host, "pidStart": &info.PIDStart, "childPgid": &info.ChildPGID,
		"childStart": &info.ChildStart,
	} {
		raw, ok := fields[key]
		if !ok || string(raw) == "null" {
			continue
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", errBadRecord, key, err)
		}
	}
	// Only a true "share" marks a shared lock: anything else is not one.
	info.Share = string(fields["share"]) == "true"
	info.Cover = string(fields["cover"]) == "true"
	// The deadline is only shown: one that is not a time is no deadline,
	// not a broken record (which a waiter would clear as stale).
	var deadline string
	if json.Unmarshal(fields["deadline"], &deadline) == nil && validTime(deadline) {
		info.Deadline = deadline
	}
	switch {
	case info.PID <= 0 || info.PID > math.MaxInt32:
		return nil, fmt.Errorf("%w: pid %d cannot name a process", errBadRecord, info.PID)
	case !validToken(info.Token):
		// The token names the holder's liveness file: anything but the
		// seed's 16 lowercase hex digits could name another path.
		return nil, fmt.Errorf("%w: token %q is not 16 lowercase hex digits", errBadRecord, SafeName(info.Token))
	case info.ChildPGID < 0 || info.ChildPGID > math.MaxInt32:
		return nil, fmt.Errorf("%w: childPgid %d cannot name a process group", errBadRecord, info.ChildPGID)
	}
	if info.ChildStart < 0 || info.ChildPGID == 0 {
		info.ChildStart = 0 // no time, or no group to time: none
	}
	return &info, nil
}

// jsonSpace is the white space JSON (and JavaScript's JSON.parse) allows
// around a value.
const jsonSpace = " \t\n\r"

// encode renders the record as the seed does: one JSON object, no newline,
// the seed's five fields first.
func (i *Info) encode() []byte {
	b, err := json.Marshal(i)
	if err != nil {
		// Info holds only strings and integers; Marshal cannot fail.
		panic("lock: encoding a record: " + err.Error())
	}
	return b
}

// tokenLen is the length of a token: 16 lowercase hex digits.
const tokenLen = 16

// validToken reports whether t is a token as the seed writes them: 16
// lowercase hex digits, and so a safe part of a file name.
func validToken(t string) bool {
	if len(t) != tokenLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// newToken returns 16 lowercase hex digits, as the seed's
// crypto.randomBytes(8).toString('hex'). A token tells holders apart; it is
// no secret, so the runtime's generator (ChaCha8, seeded by the kernel at
// start) serves, without linking the crypto packages and their start-up.
func newToken() string {
	return fmt.Sprintf("%016x", rand.Uint64())
}

// maxNameLen bounds an owner or slug, in bytes: a record stays far below
// what a reader takes for a lock file (see maxPartialRecord).
const maxNameLen = 256

// checkName says what is wrong with an owner or slug as a name to record:
// longer than maxNameLen bytes, not UTF-8, or holding a control character
// (a newline, an escape sequence) or a format character (a right-to-left
// override), which would garble or disguise every status line and log that
// shows it. nil when it may be recorded.
func checkName(s string) error {
	if len(s) > maxNameLen {
		return fmt.Errorf("is %d bytes long; at most %d", len(s), maxNameLen)
	}
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	for _, r := range s {
		switch {
		case unicode.IsControl(r):
			return fmt.Errorf("holds the control character %s", strconv.QuoteRuneToASCII(r))
		case unicode.Is(unicode.Cf, r):
			return fmt.Errorf("holds the format character %s", strconv.QuoteRuneToASCII(r))
		case unicode.In(r, unicode.Zl, unicode.Zp):
			return fmt.Errorf("holds the line or paragraph separator %s", strconv.QuoteRuneToASCII(r))
		}
	}
	return nil
}

// safeName makes s fit to record as an owner or slug when it was not given
// by the user but found (the login name, a command's base name): control
// characters are escaped (see escape.Text) and it is cut to maxNameLen bytes.
func safeName(s string) string {
	s = escape.Text(s)
	if len(s) <= maxNameLen {
		return s
	}
	s = s[:maxNameLen]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

var (
	selfStartOnce sync.Once
	selfStart     int64
)

func findSelfStart() { selfStart, _ = proc.Start(os.Getpid()) }

func newInfo(o Options) *Info {
	selfStartOnce.Do(findSelfStart)
	now := time.Now().UTC()
	info := &Info{
		PID:        os.Getpid(),
		AcquiredAt: now.Format(isoMillis),
		Owner:      o.Owner,
		Slug:       o.Slug,
		Token:      newToken(),
		Host:       proc.HostName(),
		PIDStart:   selfStart,
	}
	if o.HoldLimit > 0 {
		info.Deadline = now.Add(o.HoldLimit).Format(isoMillis)
	}
	return info
}

// Info is the content of a lock file.
//
// The first five fields are exactly the seed's (same JSON names and types),
// so files written by the seed's Node tool parse here and files written here
// parse there. The others are gpuexec's additions; they are omitted when
// empty and never required: a record without them is judged by pid and
// heartbeat alone.
type Info struct {
	PID        int    `json:"pid"`
	AcquiredAt string `json:"acquiredAt"`
	Owner      string `json:"owner"`
	Slug       string `json:"slug"`
	Token      string `json:"token"`

	// Host is the holder's host name. When it is set and differs from this
	// host, the pid cannot be checked and only the heartbeat counts.
	Host string `json:"host,omitempty"`
	// PIDStart is the holder process's start time in milliseconds since the
	// Unix epoch, so that a recycled pid is not mistaken for the holder.
	PIDStart int64 `json:"pidStart,omitempty"`
	// ChildPGID is the process group (Unix) of the job gpuexec runs. While
	// any process of that group lives, the lock is alive even if gpuexec
	// itself was killed.
	ChildPGID int `json:"childPgid,omitempty"`
	// ChildStart is when the job's first process, the leader of
	// ChildPGID, started, in ms since the epoch (as PIDStart). A group id
	// is a pid, reused once the group is gone: a group led by a process
	// started at another time is not the job's. With it, a live group
	// keeps the lock held however old its heartbeat (a record without it,
	// of an older gpuexec, only while its heartbeat is fresh).
	ChildStart int64 `json:"childStart,omitempty"`
	// Share marks a lock held in shared mode (Options.ShareMiB): the
	// record names one of its sharers, each of which has a sidecar
	// (see Status.Sharers). Readers that know nothing of it see a busy
	// device, as they should.
	Share bool `json:"share,omitempty"`
	// Cover marks the lock at a path held for the device locks beside it
	// (Options.Devices) while any of them is held: the record names one
	// of their holders, each of which shares its liveness lock. Readers
	// that know nothing of it (the seed's tool) see the machine busy, as
	// they should; a holder of the path itself waits until it is gone.
	Cover bool `json:"cover,omitempty"`
	// Deadline is when the holder's job is stopped at the latest (gpuexec
	// --timeout; see Options.HoldLimit), ISO-8601 UTC with milliseconds as
	// AcquiredAt; empty when it has none. Waiters show it. A record's
	// deadline that is not such a time is read as none, never as an
	// error.
	Deadline string `json:"deadline,omitempty"`
}
