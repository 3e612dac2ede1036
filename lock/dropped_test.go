package lock

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// A Held dropped without Release is a bug: its locks stay held, with their
// heartbeats, until the process exits. In this package's tests each Held
// taken gets a cleanup (runtime.AddCleanup) that reports it if it becomes
// unreachable while any of its lock files is still held; TestMain fails
// the run if any was reported, naming where each was taken.

func init() { heldTaken = watchDropped }

// dropped are the reports of Helds dropped without Release.
var dropped struct {
	mu   sync.Mutex
	list []string
}

// heldTrace is what a dropped Held's cleanup looks at: its lock files (not
// the Held, which must be unreachable for the cleanup to run) and where it
// was taken.
type heldTrace struct {
	files []*heldFile
	path  string
	taken string
}

func watchDropped(h *Held) {
	tr := heldTrace{files: append([]*heldFile(nil), h.locks...), path: h.o.Path, taken: takenAt()}
	if h.cover != nil {
		tr.files = append(tr.files, h.cover)
	}
	runtime.AddCleanup(h, reportDropped, tr)
}

func reportDropped(tr heldTrace) {
	for _, f := range tr.files {
		if !f.released.Load() {
			dropped.mu.Lock()
			defer dropped.mu.Unlock()
			dropped.list = append(dropped.list, fmt.Sprintf("a Held of %s was dropped without Release; taken at\n%s", tr.path, tr.taken))
			return
		}
	}
}

// takenAt is the stack of the test code that took a Held: the frames
// outside this package's non-test files.
func takenAt() string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	var b strings.Builder
	for {
		fr, more := frames.Next()
		if strings.HasSuffix(fr.File, "_test.go") {
			fmt.Fprintf(&b, "\t%s (%s:%d)\n", fr.Function, fr.File, fr.Line)
		}
		if !more {
			break
		}
	}
	return b.String()
}

// takeDropped collects the Helds reported dropped so far, after the
// garbage collector has had its chance to find them: it runs a collection
// and waits (at most a second) for the cleanup of an object dropped after
// every other, which the runtime queues behind theirs.
func takeDropped() []string {
	runtime.GC()
	done := make(chan struct{})
	sentinel := new([64]byte)
	runtime.AddCleanup(sentinel, func(c chan struct{}) { close(c) }, done)
	sentinel = nil
	runtime.GC()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	dropped.mu.Lock()
	defer dropped.mu.Unlock()
	list := dropped.list
	dropped.list = nil
	return list
}

// droppedCheck runs the tests, then fails the run if a Held was dropped
// without Release.
type droppedCheck struct{ m *testing.M }

func (d droppedCheck) Run() int {
	code := d.m.Run()
	if list := takeDropped(); len(list) > 0 {
		fmt.Println("FAIL: Helds dropped without Release:")
		for _, s := range list {
			fmt.Println(s)
		}
		if code == 0 {
			code = 1
		}
	}
	return code
}

// A Held that becomes unreachable without Release is reported, and one
// released is not.
func TestDroppedHeldIsReported(t *testing.T) {
	if got := takeDropped(); len(got) > 0 {
		t.Fatalf("dropped before this test: %v", got)
	}
	o := testOptions(t)
	released, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := released.Release(); err != nil {
		t.Fatal(err)
	}
	released = nil
	if got := takeDropped(); len(got) > 0 {
		t.Fatalf("a released Held was reported dropped: %v", got)
	}

	files := dropHeld(t, o)
	defer func() {
		for _, f := range files {
			f.release()
		}
	}()
	got := takeDropped()
	if len(got) != 1 || !strings.Contains(got[0], "TestDroppedHeldIsReported") {
		t.Fatalf("reports = %q; want one naming this test", got)
	}
}

// dropHeld takes the lock and drops the Held without Release, returning its
// lock files, which the caller releases once the drop was reported.
func dropHeld(t *testing.T, o Options) []*heldFile {
	h, err := Acquire(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return append([]*heldFile(nil), h.locks...)
}
