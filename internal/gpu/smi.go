package gpu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
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

	"github.com/gpuexec/gpuexec/internal/escape"
	"github.com/gpuexec/gpuexec/internal/proc"
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
// on PATH, else where drivers install it (/usr/bin, /usr/local/bin and
// WSL's /usr/lib/wsl/lib; on Windows System32, or NVSMI under Program
// Files).
// The error wraps ErrNoTool.
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

// The fields asked. nvidia-smi is asked for numbers and identifiers only,
// never for text that another user's process chooses (process_name: a
// process names itself anything, line breaks and commas too), so that
// nothing in its answer can shape a row. The one text field, the card's
// name, comes from the driver and the board, which only root changes; it
// is last, so that a comma in it shifts no other field. A process's name
// is the OS's, by its pid (see processName).
var (
	gpuFields = []string{"index", "uuid", "memory.total", "memory.used", "memory.free", fieldReserved, fieldMIG, "name"}
	appFields = []string{"gpu_uuid", "pid", "used_memory"}
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
	idx, ok := decimal(r[col["index"]])
	if !ok || idx > 1<<20 {
		return Device{}, fmt.Errorf("%w: index %s", ErrOutput, escape.Quote(clip(r[col["index"]])))
	}
	if !isIdentifier(r[col["uuid"]]) {
		return Device{}, fmt.Errorf("%w: %s is not a GPU's UUID", ErrOutput, escape.Quote(clip(r[col["uuid"]])))
	}
	d := Device{Index: int(idx), UUID: r[col["uuid"]], Name: escape.Text(clip(r[col["name"]])), MIG: MIGOff}
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
		v, err := parseMiB(r[i])
		if err != nil {
			return Device{}, err
		}
		*f.v = v
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

// Processes runs nvidia-smi --query-compute-apps. Each process's Name is
// what the OS calls the process with that pid now ("?" when it cannot
// tell), not what nvidia-smi says. A row that is not a device's UUID, a
// pid and a memory figure is an ErrOutput, never a row of another meaning;
// a row whose pid is [N/A] or 0 (a vGPU guest's view: no process to name)
// is left out.
func (s *SMI) Processes(ctx context.Context) ([]Process, error) {
	rows, err := s.query(ctx, "compute-apps", appFields)
	if err != nil {
		return nil, err
	}
	ps := make([]Process, 0, len(rows))
	for _, r := range rows {
		if !isIdentifier(r[0]) {
			return nil, fmt.Errorf("%w: %s is not a GPU's UUID", ErrOutput, escape.Quote(clip(r[0])))
		}
		if notGiven(r[1]) || r[1] == "0" {
			continue
		}
		pid, ok := decimal(r[1])
		if !ok || pid > math.MaxInt32 {
			return nil, fmt.Errorf("%w: %s is not a pid", ErrOutput, escape.Quote(clip(r[1])))
		}
		used, err := parseMiB(r[2])
		if err != nil {
			return nil, err
		}
		ps = append(ps, Process{Device: r[0], PID: int(pid), Used: used, Name: processName(int(pid))})
	}
	return ps, nil
}

// processName is what the OS calls pid (Linux: its comm, at most 15
// bytes; elsewhere its executable's name), made printable; "?" when the
// process is gone or cannot be read. The process chooses it, so it is
// shown, never parsed.
func processName(pid int) string {
	st, ok := proc.ReadStat(pid)
	if !ok || st.Comm == "" {
		return "?"
	}
	return escape.Text(clip(st.Comm))
}

// isIdentifier reports whether f can be a device's UUID as nvidia-smi
// prints one ("GPU-5a6c...", "MIG-GPU-.../1/0"): letters, digits and
// - / . : _ only, at most 128 bytes.
func isIdentifier(f string) bool {
	if f == "" || len(f) > 128 {
		return false
	}
	for _, c := range []byte(f) {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c == '-' || c == '/' || c == '.' || c == ':' || c == '_':
		default:
			return false
		}
	}
	return true
}

// decimal reads a whole number written in digits only (no sign, no
// space), at most 18 of them; ok false otherwise.
func decimal(f string) (int64, bool) {
	if f == "" || len(f) > 18 || strings.Trim(f, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(f, 10, 64)
	return n, err == nil
}

// notGiven reports whether f is one of the driver's words for a figure it
// does not give.
func notGiven(f string) bool {
	switch f {
	case "[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Insufficient Permissions]", "[Unknown Error]":
		return true
	}
	return false
}

// parseMiB reads a memory field: a whole number of MiB, or one of the
// driver's words for a figure it does not give.
func parseMiB(f string) (MiB, error) {
	if notGiven(f) {
		return Unknown, nil
	}
	n, ok := decimal(f)
	if !ok {
		return 0, fmt.Errorf("%w: %s is not a memory figure", ErrOutput, escape.Quote(clip(f)))
	}
	return MiB(n), nil
}

// maxOutput bounds what is read of one run's output: a healthy answer of
// 64 cards with 1000 processes each is a few MiB less.
const maxOutput = 1 << 20

// query runs one query and splits its lines into exactly len(fields)
// fields. A run that prints more than maxOutput is stopped there (killed),
// its answer an ErrOutput.
func (s *SMI) query(ctx context.Context, kind string, fields []string) ([][]string, error) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Path, "--query-"+kind+"="+strings.Join(fields, ","), "--format=csv,noheader,nounits")
	// Past the cap nvidia-smi is killed, as at the deadline: Start sets
	// cmd.Process before the copies that write here begin.
	kill := func() { cmd.Process.Kill() }
	stdout, stderr := &bounded{over: kill}, &bounded{over: kill}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = 200 * time.Millisecond
	if err := cmd.Start(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
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
	if stdout.full || stderr.full {
		return nil, fmt.Errorf("%w: it printed more than %d MiB", ErrOutput, maxOutput>>20)
	}
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && timeoutHit(ctx) {
			return nil, fmt.Errorf("%w within %s", ErrHung, timeout)
		}
		return nil, ctx.Err()
	}
	out := string(stdout.b)
	// nvidia-smi's whole answer. (No field asked is text that a
	// process chooses.)
	if strings.HasPrefix(strings.TrimSpace(out), "No devices were found") {
		return nil, ErrNoDevices
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		// It exited, but something it started kept its output open:
		// what was read may be cut anywhere.
		return nil, fmt.Errorf("%w: nvidia-smi exited, but a process it started kept its output open", ErrDriver)
	}
	if err != nil {
		msg := firstLine(out)
		if msg == "" {
			msg = firstLine(string(stderr.b))
		}
		if msg == "" {
			msg = err.Error()
		}
		if m := notAFieldRE.FindStringSubmatch(msg); m != nil && slices.Contains(fields, m[1]) {
			return nil, &notAField{name: m[1], msg: msg}
		}
		return nil, fmt.Errorf("%w: %s", ErrDriver, msg)
	}
	return rows(out, len(fields))
}

// rows splits an answer into lines of n fields: ", " between them, the
// last taking the rest of its line (the card's name may hold one). Blank
// lines are none; a line of fewer fields is an ErrOutput, never a part of
// the line before.
func rows(out string, n int) ([][]string, error) {
	var rs [][]string
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		r := strings.SplitN(line, ", ", n)
		if len(r) != n {
			return nil, fmt.Errorf("%w: %s has %d field(s), not %d", ErrOutput, escape.Quote(clip(line)), len(r), n)
		}
		for i := range r {
			r[i] = strings.TrimSpace(r[i])
		}
		rs = append(rs, r)
	}
	return rs, nil
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
	return escape.Text(clip(s))
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// bounded keeps what nvidia-smi prints, up to maxOutput bytes. The first
// write past that calls over (which kills nvidia-smi) and fails, so that
// the copy from its pipe ends. It is no bytes.Buffer on purpose: io.Copy
// would read through a Buffer's ReadFrom, everything, never calling Write.
type bounded struct {
	b    []byte
	full bool
	over func()
}

func (w *bounded) Write(p []byte) (int, error) {
	if w.full || len(w.b)+len(p) > maxOutput {
		if !w.full {
			w.full = true
			w.over()
		}
		return 0, errTooMuch
	}
	w.b = append(w.b, p...)
	return len(p), nil
}

var errTooMuch = errors.New("nvidia-smi printed too much")

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
