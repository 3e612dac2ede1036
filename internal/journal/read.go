package journal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"time"

	"github.com/gpuexec/gpuexec/internal/logfile"
	"github.com/gpuexec/gpuexec/internal/osfile"
)

// Bounds of a read: no more than MaxBytes is read from all the files of
// one Load together (or by one From), and no more than MaxRecords records
// are kept from them. (A journal and its rotated files, as Append keeps
// them, are at most (Keep+1)*MaxSize bytes: MaxBytes is several hosts'.)
const (
	MaxBytes   = 1 << 30
	MaxRecords = 1 << 20
)

// Window selects records by their Ended time: From ≤ Ended < Until; a zero
// bound is open.
type Window struct {
	From, Until time.Time
}

// Holds reports whether the window holds t.
func (w Window) Holds(t time.Time) bool {
	return (w.From.IsZero() || !t.Before(w.From)) && (w.Until.IsZero() || t.Before(w.Until))
}

// Read is what was read from one or more journals.
type Read struct {
	// Records are the valid records in the window, by Ended then Queued
	// (a record read twice, from two names of one file, is kept once).
	Records []Record
	// Files are the files read.
	Files []string
	// SetAside counts the lines that were not records, by reason: "too
	// long", "not JSON", "invalid" (see Record.Validate), "no end" (a
	// last line without its newline: one being written, or cut short).
	SetAside map[string]int
	// Missing are the files named that did not exist.
	Missing []string
	// Truncated says that a bound (MaxBytes, MaxRecords) stopped the read.
	Truncated bool

	// left is what Load has left to read of MaxBytes, in all its files;
	// bounded says that it counts.
	left    int64
	bounded bool
}

// Lines is the number of lines set aside.
func (r *Read) Lines() int {
	n := 0
	for _, c := range r.SetAside {
		n += c
	}
	return n
}

// Load reads the journals at paths, each with its rotated files (those of
// package logfile's naming beside it), keeping the records within w. A
// path that does not exist is listed in Missing; one that is not a regular
// file (a link, a FIFO, a folder) is an error, never followed or waited
// on.
func Load(paths []string, w Window) (*Read, error) {
	// Any member of the group may put files named as rotated journals
	// beside one, as many and as large (sparse) as it likes: MaxBytes
	// bounds them all together, and the journals named are read before
	// any rotated file, so that one journal's rotated files cannot take
	// the bound from another journal.
	rd := &Read{SetAside: map[string]int{}, left: MaxBytes, bounded: true}
	seen := map[string]bool{}
	read := func(f string, main bool) error {
		if seen[f] {
			return nil
		}
		seen[f] = true
		if rd.left <= 0 || rd.Truncated {
			rd.Truncated = true
			return nil
		}
		return rd.file(f, w, main)
	}
	for _, p := range paths {
		if err := read(p, true); err != nil {
			return nil, err
		}
	}
	for _, p := range paths {
		rotated, err := logfile.Rotated(p)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, f := range rotated {
			if err := read(f, false); err != nil {
				return nil, err
			}
		}
	}
	rd.Finish()
	return rd, nil
}

// file reads one file into rd; main says it is a journal named, not one
// of its rotated files.
func (rd *Read) file(path string, w Window, main bool) error {
	f, err := osfile.OpenRegular(path, false)
	if errors.Is(err, fs.ErrNotExist) {
		if main {
			rd.Missing = append(rd.Missing, path)
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	rd.Files = append(rd.Files, path)
	if err := rd.From(f, w); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// From reads the journal lines of r (at most MaxBytes; within Load, at
// most what is left of MaxBytes for all its files) into rd, keeping the
// valid records within w. Call Finish once after the last From.
func (rd *Read) From(r io.Reader, w Window) error {
	if rd.SetAside == nil {
		rd.SetAside = map[string]int{}
	}
	limit := int64(MaxBytes)
	if rd.bounded {
		limit = rd.left
	}
	lr := &io.LimitedReader{R: r, N: limit}
	if rd.bounded {
		defer func() { rd.left -= limit - lr.N }()
	}
	br := bufio.NewReaderSize(lr, 64<<10)
	for {
		line, err := readLine(br)
		switch {
		case errors.Is(err, errTooLong):
			rd.SetAside["too long"]++
			continue
		case errors.Is(err, errNoEnd):
			if len(bytes.TrimSpace(line)) > 0 {
				rd.SetAside["no end"]++
			}
			if lr.N <= 0 {
				rd.Truncated = true
			}
			return nil
		case err != nil:
			return err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			rd.SetAside["not JSON"]++
			continue
		}
		if err := rec.Validate(); err != nil {
			rd.SetAside["invalid"]++
			continue
		}
		if !w.Holds(rec.Ended) {
			continue
		}
		if len(rd.Records) >= MaxRecords {
			rd.Truncated = true
			return nil
		}
		rd.Records = append(rd.Records, rec)
	}
}

var (
	errTooLong = errors.New("line too long")
	errNoEnd   = errors.New("no newline at the end")
)

// readLine returns the next line of br without its newline; a line longer
// than MaxLine is skipped whole (errTooLong); what is left at the end
// without a newline is errNoEnd.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	long := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !long {
			if len(line)+len(chunk) > MaxLine+1 {
				long, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		switch {
		case err == nil:
			if long {
				return nil, errTooLong
			}
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if long {
				return nil, errTooLong
			}
			return line, errNoEnd
		default:
			return nil, err
		}
	}
}

// Finish orders the records (by Ended, then Queued) and drops any record
// read twice (the same host, pid and queued time).
func (rd *Read) Finish() {
	sort.SliceStable(rd.Records, func(i, j int) bool {
		a, b := &rd.Records[i], &rd.Records[j]
		if !a.Ended.Equal(b.Ended) {
			return a.Ended.Before(b.Ended)
		}
		return a.Queued.Before(b.Queued)
	})
	type key struct {
		host   string
		pid    int
		queued int64
	}
	seen := make(map[key]bool, len(rd.Records))
	out := rd.Records[:0]
	for _, r := range rd.Records {
		k := key{r.Host, r.PID, r.Queued.UnixNano()}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, r)
	}
	rd.Records = out
}
