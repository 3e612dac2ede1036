package lock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// maxRecordSize bounds how much of a lock file is read. A real record is a
// few hundred bytes; anything larger is treated as unparseable content.
const maxRecordSize = 64 << 10

// isoMillis is the layout of JavaScript's Date.prototype.toISOString, which
// the seed's Node tool writes into acquiredAt.
const isoMillis = "2006-01-02T15:04:05.000Z"

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
}

// Holder names the holder the way log lines and messages do:
// "channels/ep12 (pid 4242)".
func (i *Info) Holder() string {
	if i == nil {
		return "an unknown holder"
	}
	owner, slug := i.Owner, i.Slug
	if owner == "" {
		owner = "?"
	}
	if slug == "" {
		slug = "?"
	}
	s := fmt.Sprintf("%s/%s (pid %d", owner, slug, i.PID)
	if i.Host != "" && i.Host != hostName() {
		s += " on " + i.Host
	}
	return s + ")"
}

// Acquired parses AcquiredAt. The zero time is returned when it is not a
// valid timestamp.
func (i *Info) Acquired() time.Time {
	t, err := time.Parse(time.RFC3339Nano, i.AcquiredAt)
	if err != nil {
		return time.Time{}
	}
	return t
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
	} {
		raw, ok := fields[key]
		if !ok || string(raw) == "null" {
			continue
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", errBadRecord, key, err)
		}
	}
	switch {
	case info.PID <= 0 || info.PID > math.MaxInt32:
		return nil, fmt.Errorf("%w: pid %d cannot name a process", errBadRecord, info.PID)
	case info.Token == "":
		return nil, fmt.Errorf("%w: no token", errBadRecord)
	case info.ChildPGID < 0 || info.ChildPGID > math.MaxInt32:
		return nil, fmt.Errorf("%w: childPgid %d cannot name a process group", errBadRecord, info.ChildPGID)
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

// newToken returns 16 lowercase hex digits, as the seed's
// crypto.randomBytes(8).toString('hex'). A token tells holders apart; it is
// no secret, so the runtime's generator (ChaCha8, seeded by the kernel at
// start) serves, without linking the crypto packages and their start-up.
func newToken() string {
	return fmt.Sprintf("%016x", rand.Uint64())
}
