package etcdlock

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/gpuexec/gpuexec/lock"
)

// record is what a waiter's or holder's key holds: the lock file's record
// and when the waiter arrived.
type record struct {
	lock.Info
	Since string `json:"since,omitempty"`
}

// isoMillis is JavaScript's toISOString layout, as in lock files.
const isoMillis = "2006-01-02T15:04:05.000Z"

// newRecord is a new waiter's record: this waiter's pid (Backend.PID),
// names, host and a fresh token, arriving now.
func (b Backend) newRecord(o lock.Options) (record, error) {
	var t [8]byte
	if _, err := rand.Read(t[:]); err != nil {
		return record{}, fmt.Errorf("lock: making a token: %w", err)
	}
	pid := b.PID
	if pid == 0 {
		pid = os.Getpid()
	}
	host, _ := os.Hostname()
	return record{
		Info: lock.Info{
			PID:   pid,
			Owner: o.Owner,
			Slug:  o.Slug,
			Token: hex.EncodeToString(t[:]),
			Host:  host,
		},
		Since: time.Now().UTC().Format(isoMillis),
	}, nil
}

// encode is the record as its key holds it: JSON, as a lock file.
func (r record) encode() string {
	b, err := json.Marshal(r)
	if err != nil {
		panic("etcdlock: encoding a record: " + err.Error())
	}
	return string(b)
}
