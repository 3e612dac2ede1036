// Package testlog is a log sink for tests: goroutines (a logger, a child's
// output copier) write to it while the test reads it back.
package testlog

import (
	"bytes"
	"io"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// Buffer collects what is written to it, safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Logger logs everything from Debug up to w.
func Logger(w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: w, Level: hclog.Debug})
}
