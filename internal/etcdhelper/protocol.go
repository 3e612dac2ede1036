// Package etcdhelper is the conversation between gpuexec and its etcd
// helper, gpuexec-etcd: the client side (Backend, a lock.Backend that
// starts the helper) and the helper's side (Serve). The etcd client (gRPC,
// protobuf) is linked into the helper only, so that gpuexec, which runs far
// more often with a lock file, does not pay for its start-up.
//
// The protocol is JSON lines over the helper's stdin and stdout, versioned:
// the client's first line is a hello naming Protocol, and the helper
// answers with its own hello before anything else, so that a gpuexec and a
// gpuexec-etcd of different releases (installed separately) refuse each
// other with one clear line before any lock is touched. Then one request:
//
//   - status: one answer, "report" (the lock and its queue);
//   - clear: one answer, "cleared" (the lock as judged, and an error such
//     as lock.ErrHeld);
//   - hold: "held" (the record), "busy" (try: contention) or "waited" (the
//     wait ended, with the holder seen); while held, "child" and "release"
//     requests are answered "ok" and "released", a "note" request is not
//     answered, and "lost" may come at any time. "log" lines (the backend's
//     log) come at any time.
//
// A hold request with live set says that the helper's descriptor 3 is the
// read end of a pipe whose write end the user keeps and passes on to its
// job (its liveness pipe): it hangs up only once the user and every process
// of the job that kept the descriptor are gone. The note request names the
// job's process group the moment it is started. A helper whose input ends
// without a release (the user died) keeps the lock while the pipe is open
// or a process of the noted group lives, then releases it.
//
// Every value that crosses is one of the protocol's own types with JSON
// tags (request, event, and the wire types of what package lock returns),
// never one of package lock's: a field renamed there cannot change the
// protocol. testdata/protocol pins every line, byte for byte.
package etcdhelper

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpuexec/gpuexec/lock"
)

// Protocol is the version of the conversation this package speaks. Both
// sides refuse any other. 3: the liveness pipe, the note request, and
// package etcdlock's key layout of that release.
const Protocol = 3

// Name is the helper program. It is looked for in $GPUEXEC_ETCD_AGENT (a
// path, Env), beside the running executable, then on PATH.
const Name = "gpuexec-etcd"

// Env names the environment variable that points at the helper.
const Env = "GPUEXEC_ETCD_AGENT"

// request is one line from the user of a lock to the helper.
type request struct {
	// Op is hello (the first line), then status, clear or hold (the
	// second); cancel (while waiting); note, child or release (while
	// holding).
	Op       string `json:"op"`
	Protocol int    `json:"protocol,omitempty"` // hello
	// Wait: hold queues until held (or cancel); without it, hold tries
	// once.
	Wait      bool          `json:"wait,omitempty"`
	Path      string        `json:"path,omitempty"`
	Owner     string        `json:"owner,omitempty"`
	Slug      string        `json:"slug,omitempty"`
	Report    time.Duration `json:"report,omitempty"`
	Stale     time.Duration `json:"stale,omitempty"`
	Heartbeat time.Duration `json:"heartbeat,omitempty"`
	Poll      time.Duration `json:"poll,omitempty"`
	// HoldLimit is lock.Options.HoldLimit (hold). An older helper
	// ignores it: its records have no deadline.
	HoldLimit time.Duration `json:"holdLimit,omitempty"`
	Force     bool          `json:"force,omitempty"`
	// Live (hold): the helper's descriptor 3 is the user's liveness
	// pipe.
	Live bool `json:"live,omitempty"`
	// PGID is the job's process group (note, child).
	PGID int `json:"pgid,omitempty"`
	// Level is the lowest log level the user wants forwarded.
	Level string `json:"level,omitempty"`
}

// event is one line from the helper.
type event struct {
	// Event is hello (the first line); log, lost (any time); report,
	// cleared, held, busy, waited, error (answers to the request); ok,
	// released (answers to child and release).
	Event    string        `json:"event"`
	Protocol int           `json:"protocol,omitempty"` // hello
	Level    string        `json:"level,omitempty"`
	Msg      string        `json:"msg,omitempty"`
	Args     []any         `json:"args,omitempty"`
	Info     *wireInfo     `json:"info,omitempty"`
	Status   *wireStatus   `json:"status,omitempty"`
	Report   *wireReport   `json:"report,omitempty"`
	Seen     []*wireStatus `json:"seen,omitempty"`
	Waited   time.Duration `json:"waited,omitempty"`
	Error    string        `json:"error,omitempty"`
	Kind     string        `json:"kind,omitempty"` // invalid, unreachable, held; version (hello refused)
}

// errKind is the kind of err carried in event.Kind, so that errors.Is works
// across the pipe.
func errKind(err error) string {
	switch {
	case errors.Is(err, lock.ErrInvalid):
		return "invalid"
	case errors.Is(err, lock.ErrUnreachable):
		return "unreachable"
	case errors.Is(err, lock.ErrHeld):
		return "held"
	}
	return ""
}

// remoteError is an error reported by the helper, wrapping the sentinel of
// its kind.
type remoteError struct {
	msg  string
	kind error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

func kindError(msg, kind string) error {
	var k error
	switch kind {
	case "invalid":
		k = lock.ErrInvalid
	case "unreachable":
		k = lock.ErrUnreachable
	case "held":
		k = lock.ErrHeld
	}
	return &remoteError{msg: msg, kind: k}
}

// mismatch says that the two sides speak different protocols (an error
// wrapping lock.ErrInvalid).
func mismatch(client, helper string) error {
	return &remoteError{kind: lock.ErrInvalid, msg: fmt.Sprintf("gpuexec and %s are from different releases (%s; %s): "+
		"install both from the same release (go install github.com/gpuexec/gpuexec/...@VERSION)", Name, client, helper)}
}
