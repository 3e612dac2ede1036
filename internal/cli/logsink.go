package cli

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/gpuexec/gpuexec/internal/logfile"
)

// logSink is the --log file as the logger's sink: the file's errors, which
// the logger drops, are said on stderr instead, each kind once a job, so
// that a log that stops taking lines never goes quiet unnoticed and never
// floods stderr either. The lines themselves go on on stderr whatever
// becomes of the file.
type logSink struct {
	file *logfile.File
	warn hclog.Logger // stderr alone

	mu   sync.Mutex
	said map[string]bool
}

// Write writes p, one line, to the file.
func (s *logSink) Write(p []byte) (int, error) {
	n, err := s.file.Write(p)
	if err == nil {
		return n, nil
	}
	switch {
	case errors.Is(err, logfile.ErrBusy):
		s.once("busy", fmt.Sprintf("--log: %v; the log is skipped for the rest of this job (its lines go on on stderr)", err))
	case errors.Is(err, logfile.ErrReplaced):
		s.once("replaced", fmt.Sprintf("--log: %v; nothing more is written to it in this job (its lines go on on stderr)", err))
	default:
		s.once("lost", fmt.Sprintf("--log: %v; lines dropped while this lasts (they go on on stderr)", err))
	}
	return n, err
}

// rotateFailed is logfile.Options.RotateFailed.
func (s *logSink) rotateFailed(err error) {
	s.once("rotate", fmt.Sprintf("--log: cannot rotate the log: %v; lines go on into it past --log-max-size", err))
}

// once says msg on stderr, unless something of its kind has been said.
func (s *logSink) once(kind, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.said[kind] {
		return
	}
	s.said[kind] = true
	s.warn.Warn(msg)
}
