package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SMI is nvidia-smi as a Source: each call runs
//
//	nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits
//
// (or --query-compute-apps), which prints one line per device or process,
// the fields in the order asked with ", " between them, memory in MiB.
//
// Fields that older drivers do not know (memory.reserved before R510,
// mig.mode.current before R450) are asked for until the driver answers
// that it does not know one; that SMI then asks without it (see
// Memory.Reserved and MIGOff for what is known then).
type SMI struct {
	// Path is the nvidia-smi executable.
	Path string
	// Timeout bounds one run; 0 is DefaultTimeout. A run that takes
	// longer is abandoned (ErrHung), even one the kernel cannot kill (a
	// wedged driver).
	Timeout time.Duration

	// unknown has bit i set once the driver said it does not know
	// optional[i].
	unknown atomic.Uint32
}

// DefaultTimeout bounds one nvidia-smi run: a healthy one answers in well
// under a second, on Windows too; one that takes this long is wedged.
const DefaultTimeout = 4 * time.Second

// Locate finds nvidia-smi: path when given (the --nvidia-smi flag), else
// on PATH, else where the driver installs it (see driverPaths). The error
// wraps ErrNoTool.
func Locate(path string) (*SMI, error) {
	if path != "" {
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: %v", ErrNoTool, err)
		case fi.IsDir():
			return nil, fmt.Errorf("%w: %s is a folder", ErrNoTool, path)
		}
		// The file found here, not a command of that name on PATH
		// (what exec makes of a name without a separator).
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		return &SMI{Path: path}, nil
	}
	if p, err := exec.LookPath("nvidia-smi"); err == nil {
		return &SMI{Path: p}, nil
	}
	for _, p := range driverPaths() {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return &SMI{Path: p}, nil
		}
	}
	return nil, fmt.Errorf("%w on PATH; give its path with --nvidia-smi or GPUEXEC_NVIDIA_SMI", ErrNoTool)
}

// The fields asked, the free-text one last, so that a comma inside it
// cannot shift the others.
var (
	gpuFields = []string{"index", "uuid", "memory.total", "memory.used", "memory.free", fieldReserved, fieldMIG, "name"}
	appFields = []string{"gpu_uuid", "pid", "used_memory", "process_name"}
)

// Fields of gpuFields that a driver may not know.
const (
	fieldReserved = "memory.reserved"
	fieldMIG      = "mig.mode.current"
)

var optional = []string{fieldReserved, fieldMIG}

// fields are the gpuFields this driver is asked for: all but the optional
// ones it said it does not know.
func (s *SMI) fields() []string {
	unknown := s.unknown.Load()
	fs := make([]string, 0, len(gpuFields))
	for _, f := range gpuFields {
		if i := slices.Index(optional, f); i >= 0 && unknown&(1<<i) != 0 {
			continue
		}
		fs = append(fs, f)
	}
	return fs
}

// Devices runs nvidia-smi --query-gpu. A driver that does not know an
// optional field is asked again without it (at most once per field).
func (s *SMI) Devices(ctx context.Context) ([]Device, error) {
	fields := s.fields()
	rows, err := s.query(ctx, "gpu", fields)
	for range optional {
		var nf *notAField
		if !errors.As(err, &nf) {
			break
		}
		i := slices.Index(optional, nf.name)
		if i < 0 || !slices.Contains(fields, nf.name) {
			break // a field it must know, or one no longer asked
		}
		s.unknown.Or(1 << i)
		fields = s.fields()
		rows, err = s.query(ctx, "gpu", fields)
	}
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, ErrNoDevices
	}
	col := make(map[string]int, len(fields))
	for i, f := range fields {
		col[f] = i
	}
	devs := make([]Device, 0, len(rows))
	for _, r := range rows {
		d, err := device(r, col)
		if err != nil {
			return nil, err
		}
		for _, o := range devs {
			switch {
			case o.Index == d.Index:
				return nil, fmt.Errorf("%w: its listing is ambiguous: two rows for GPU %d", ErrDriver, d.Index)
			case o.UUID == d.UUID:
				return nil, fmt.Errorf("%w: its listing is ambiguous: GPU %d and GPU %d are both %s", ErrDriver, o.Index, d.Index, d.UUID)
			}
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// device reads one row of --query-gpu, whose fields are at col.
func device(r []string, col map[string]int) (Device, error) {
	idx, err := strconv.Atoi(r[col["index"]])
	if err != nil || idx < 0 {
		return Device{}, fmt.Errorf("%w: index %q", ErrOutput, printable(r[col["index"]]))
	}
	d := Device{Index: idx, UUID: printable(r[col["uuid"]]), Name: printable(r[col["name"]]), MIG: MIGOff}
	m := &d.Memory
	m.Reserved = Unknown
	for _, f := range []struct {
		name string
		v    *MiB
	}{{"memory.total", &m.Total}, {"memory.used", &m.Used}, {"memory.free", &m.Free}, {fieldReserved, &m.Reserved}} {
		i, asked := col[f.name]
		if !asked {
			continue
		}
		if *f.v, err = parseMiB(r[i]); err != nil {
			return Device{}, err
		}
	}
	if !m.Reserved.Known() && m.Total.Known() && m.Used.Known() && m.Free.Known() {
		// What is neither used nor free: about 0 from a driver older
		// than the field, whose used includes what it keeps (the
		// three figures are rounded apart, so it may come to -1).
		m.Reserved = max(m.Total-m.Used-m.Free, 0)
	}
	if i, asked := col[fieldMIG]; asked {
		d.MIG = parseMIG(r[i])
	}
	return d, nil
}

// parseMIG reads mig.mode.current.
func parseMIG(f string) MIGMode {
	switch f {
	case "Enabled":
		return MIGOn
	case "Disabled", "[N/A]", "N/A", "[Not Supported]", "Not Supported":
		return MIGOff // N/A, Not Supported: a card without MIG
	}
	return MIGUnknown
}

// Processes runs nvidia-smi --query-compute-apps.
func (s *SMI) Processes(ctx context.Context) ([]Process, error) {
	rows, err := s.query(ctx, "compute-apps", appFields)
	if err != nil {
		return nil, err
	}
	ps := make([]Process, 0, len(rows))
	for _, r := range rows {
		pid, err := strconv.Atoi(r[1])
		if err != nil || pid <= 0 {
			continue // [N/A] (a vGPU guest's view): no process to name
		}
		used, err := parseMiB(r[2])
		if err != nil {
			return nil, err
		}
		ps = append(ps, Process{Device: printable(r[0]), PID: pid, Used: used, Name: printable(baseName(r[3]))})
	}
	return ps, nil
}

// parseMiB reads a memory field: a whole number of MiB, or one of the
// driver's words for a figure it does not give.
func parseMiB(f string) (MiB, error) {
	switch f {
	case "[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Insufficient Permissions]", "[Unknown Error]":
		return Unknown, nil
	}
	n, err := strconv.ParseInt(f, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %q is not a memory figure", ErrOutput, printable(f))
	}
	return MiB(n), nil
}

// maxOutput bounds what is read of one run's output.
const maxOutput = 1 << 20

// query runs one query and splits its lines into len(fields) fields.
func (s *SMI) query(ctx context.Context, kind string, fields []string) ([][]string, error) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var stdout, stderr capped
	cmd := exec.CommandContext(ctx, s.Path, "--query-"+kind+"="+strings.Join(fields, ","), "--format=csv,noheader,nounits")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 200 * time.Millisecond
	if err := cmd.Start(); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %v", ErrNoTool, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrDriver, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout + time.Second):
		// Killed and still not gone: a process in the driver that the
		// kernel cannot end. Leave it; its goroutine ends with it.
		return nil, fmt.Errorf("%w within %s", ErrHung, timeout)
	}
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && timeoutHit(ctx) {
			return nil, fmt.Errorf("%w within %s", ErrHung, timeout)
		}
		return nil, ctx.Err()
	}
	out := stdout.String()
	// nvidia-smi's whole answer, not a process's name that says so.
	if strings.HasPrefix(strings.TrimSpace(out), "No devices were found") {
		return nil, ErrNoDevices
	}
	if err != nil {
		msg := firstLine(out)
		if msg == "" {
			msg = firstLine(stderr.String())
		}
		if msg == "" {
			msg = err.Error()
		}
		if m := notAFieldRE.FindStringSubmatch(msg); m != nil && slices.Contains(fields, m[1]) {
			return nil, &notAField{name: m[1], msg: msg}
		}
		return nil, fmt.Errorf("%w: %s", ErrDriver, msg)
	}
	var rows [][]string
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		r := strings.SplitN(line, ", ", len(fields))
		if len(r) < len(fields) && len(rows) > 0 {
			// The free-text field, last, went on past a line
			// break: a process may name itself anything.
			last := &rows[len(rows)-1][len(fields)-1]
			*last += "\n" + line
			continue
		}
		if len(r) != len(fields) {
			return nil, fmt.Errorf("%w: %q", ErrOutput, printable(clip(line)))
		}
		for i := range r {
			r[i] = strings.TrimSpace(r[i])
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// notAFieldRE is how nvidia-smi refuses a field it does not know.
var notAFieldRE = regexp.MustCompile(`^Field "([a-z_.]+)" is not a valid field to query\.`)

// notAField is a query that failed because the driver does not know one
// of the fields asked: an ErrDriver.
type notAField struct{ name, msg string }

func (e *notAField) Error() string { return ErrDriver.Error() + ": " + e.msg }
func (e *notAField) Unwrap() error { return ErrDriver }

// timeoutHit reports whether ctx ended at its own deadline (not its
// parent's cancellation).
func timeoutHit(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	return printable(clip(s))
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// capped is a buffer that keeps the first maxOutput bytes written.
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxOutput - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Later is a Source that finds nvidia-smi (Locate("")) only when first
// asked, once: for what a job may never ask (the peak sampler of a job
// that ends within a second), so that its start does no search of PATH.
// Without nvidia-smi every call returns Locate's error (ErrNoTool).
func Later() Source { return &later{} }

type later struct {
	once sync.Once
	smi  *SMI
	err  error
}

func (l *later) find() (*SMI, error) {
	l.once.Do(func() { l.smi, l.err = Locate("") })
	return l.smi, l.err
}

func (l *later) Devices(ctx context.Context) ([]Device, error) {
	s, err := l.find()
	if err != nil {
		return nil, err
	}
	return s.Devices(ctx)
}

func (l *later) Processes(ctx context.Context) ([]Process, error) {
	s, err := l.find()
	if err != nil {
		return nil, err
	}
	return s.Processes(ctx)
}
