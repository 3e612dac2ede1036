// Package gpu is what gpuexec knows of the cards themselves, as opposed to
// its locks: the devices, their video memory, and the processes that use
// it. The facts come from a Source; the one there is today is nvidia-smi
// (see SMI), which ships with every NVIDIA driver and keeps gpuexec free of
// cgo. Another (NVML, rocm-smi) is one more Source.
//
// Nothing here guesses: a figure the driver does not give is Unknown, and a
// Source that fails, hangs or finds no device says so with an error that
// callers tell apart with errors.Is (ErrNoTool, ErrNoDevices, ErrDriver,
// ErrHung, ErrOutput). Unknown is never read as free.
package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuexec/gpuexec/internal/escape"
)

// Source gives the facts. Each call asks the driver anew; it may take a
// while (nvidia-smi: tens of milliseconds, more on Windows) and ends
// within the Source's own bound whatever the driver does.
type Source interface {
	// Devices lists the devices in the driver's order (nvidia-smi's
	// index: PCI bus order), no two with one index or one UUID: a
	// listing that has two is an error, never one of them.
	Devices(ctx context.Context) ([]Device, error)
	// Processes lists the processes that hold video memory (compute
	// contexts), on every device.
	Processes(ctx context.Context) ([]Process, error)
}

// MiB is an amount of video memory in mebibytes, or Unknown.
type MiB int64

// Unknown is a figure the driver did not give ([N/A], [Not Supported],
// or a process's memory under Windows' WDDM).
const Unknown MiB = -1

// Known reports whether m is a figure.
func (m MiB) Known() bool { return m >= 0 }

// String is "17.2 GiB" from 1 GiB up, "512 MiB" below, "unknown".
func (m MiB) String() string {
	switch {
	case !m.Known():
		return "unknown"
	case m >= 1024:
		return strconv.FormatFloat(float64(m)/1024, 'f', 1, 64) + " GiB"
	default:
		return strconv.FormatInt(int64(m), 10) + " MiB"
	}
}

// MarshalJSON is the number of MiB, or null when unknown.
func (m MiB) MarshalJSON() ([]byte, error) {
	if !m.Known() {
		return []byte("null"), nil
	}
	return strconv.AppendInt(nil, int64(m), 10), nil
}

// Memory is a device's video memory.
type Memory struct {
	Total MiB `json:"totalMiB"`
	Used  MiB `json:"usedMiB"`
	Free  MiB `json:"freeMiB"`
	// Reserved is what the driver and firmware keep on the card, which
	// no process can ever have: Total = Used + Free + Reserved. A Source
	// gives the driver's figure, or, where the driver gives none, Total
	// less Used and Free when all three are known (0 on drivers whose
	// Used includes what they keep); Unknown otherwise.
	Reserved MiB `json:"reservedMiB"`
}

// Usable is the most that can ever be free on the card: Total less
// Reserved, or Total when Reserved is unknown; Unknown when Total is.
func (m Memory) Usable() MiB {
	if !m.Total.Known() || !m.Reserved.Known() {
		return m.Total
	}
	return m.Total - m.Reserved
}

// MIGMode is whether a device is split into MIG instances (Multi-Instance
// GPU, on A100, H100 and later data-centre cards).
type MIGMode int8

const (
	// MIGOff is a whole card: MIG disabled, a card without MIG, or a
	// driver older than MIG (R450), which knows no MIG mode.
	MIGOff MIGMode = iota
	// MIGOn is a card in MIG mode: a CUDA process runs in one instance,
	// and the device's Memory is the whole card's, not what an instance
	// has.
	MIGOn
	// MIGUnknown is a driver that knows MIG but did not say whether the
	// card is in MIG mode ([Unknown Error], [Insufficient Permissions],
	// or a word it did not use before).
	MIGUnknown
)

// MarshalJSON is true in MIG mode, false on a whole card, null when
// unknown.
func (m MIGMode) MarshalJSON() ([]byte, error) {
	switch m {
	case MIGOff:
		return []byte("false"), nil
	case MIGOn:
		return []byte("true"), nil
	}
	return []byte("null"), nil
}

// Device is one GPU as the driver lists it.
type Device struct {
	// Index is the driver's number for it (nvidia-smi's, in PCI bus
	// order: what CUDA_VISIBLE_DEVICES means with
	// CUDA_DEVICE_ORDER=PCI_BUS_ID).
	Index int `json:"index"`
	// UUID is its stable name ("GPU-5a6c..."); CUDA_VISIBLE_DEVICES
	// takes it too.
	UUID   string `json:"uuid"`
	Name   string `json:"name"`
	Memory Memory `json:"memory"`
	// MIG is whether it is in MIG mode, where Memory does not say what
	// a job on it can have.
	MIG MIGMode `json:"mig"`
}

// Process is a process holding video memory on a device.
type Process struct {
	// Device is the UUID of the device it uses.
	Device string `json:"-"`
	PID    int    `json:"pid"`
	// Name is what the OS calls the process (its comm on Linux, its
	// executable's name elsewhere), made printable; "?" when the OS
	// cannot tell. Never text from nvidia-smi: the process chose it,
	// and it is only shown.
	Name string `json:"name"`
	// Used is its video memory; Unknown where the driver does not say
	// (Windows' WDDM).
	Used MiB `json:"usedMiB"`
}

// OnDevice is those of ps that use the device with uuid.
func OnDevice(ps []Process, uuid string) []Process {
	var on []Process
	for _, p := range ps {
		if p.Device == uuid {
			on = append(on, p)
		}
	}
	return on
}

// Errors of a Source, told apart with errors.Is.
var (
	// ErrNoTool says there is no nvidia-smi to ask (none given, none on
	// PATH or where the driver installs it).
	ErrNoTool = errors.New("no nvidia-smi found")
	// ErrNoDevices says the driver found no GPU ("No devices were
	// found").
	ErrNoDevices = errors.New("nvidia-smi found no GPU")
	// ErrDriver says nvidia-smi could not reach the driver ("NVIDIA-SMI
	// has failed because it couldn't communicate with the NVIDIA
	// driver") or failed otherwise.
	ErrDriver = errors.New("nvidia-smi failed")
	// ErrHung says nvidia-smi did not answer within its bound and was
	// abandoned.
	ErrHung = errors.New("nvidia-smi did not answer")
	// ErrOutput says nvidia-smi answered something that is not the CSV
	// asked for.
	ErrOutput = errors.New("nvidia-smi's output could not be read")
)

// ParseSize reads a video memory size as users write it: a number with a
// unit, G/GB/GiB or M/MB/MiB (all binary: a "10G" card is 10240 MiB as
// nvidia-smi counts), "1.5G" too. The result is at least 1 MiB.
func ParseSize(s string) (MiB, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		if i < 0 && t != "" {
			return 0, fmt.Errorf("%q has no unit; use 10G, 512M or 12000MiB", s)
		}
		return 0, fmt.Errorf("%q is not a size; use 10G, 512M or 12000MiB", s)
	}
	n, err := strconv.ParseFloat(t[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size; use 10G, 512M or 12000MiB", s)
	}
	var mib float64
	switch strings.ToLower(strings.TrimSpace(t[i:])) {
	case "g", "gb", "gib":
		mib = n * 1024
	case "m", "mb", "mib":
		mib = n
	default:
		return 0, fmt.Errorf("%q: the unit must be G, GiB, M or MiB; use 10G, 512M or 12000MiB", s)
	}
	switch {
	case mib < 1:
		return 0, fmt.Errorf("%q is less than 1 MiB", s)
	case mib > 1<<30: // a petabyte: no card is near
		return 0, fmt.Errorf("%q is larger than any GPU's memory", s)
	}
	return MiB(mib + 0.5), nil
}

// Find returns the device that name means in devs: an index ("0"), a UUID
// ("GPU-5a6c...") or a unique prefix of one, as CUDA_VISIBLE_DEVICES takes
// them; ok false when none or several match.
func Find(devs []Device, name string) (Device, bool) {
	name = strings.TrimSpace(name)
	if n, err := strconv.Atoi(name); err == nil {
		for _, d := range devs {
			if d.Index == n {
				return d, true
			}
		}
		return Device{}, false
	}
	var found []Device
	for _, d := range devs {
		if d.UUID == name {
			return d, true
		}
		if name != "" && strings.HasPrefix(strings.ToLower(d.UUID), strings.ToLower(name)) {
			found = append(found, d)
		}
	}
	if len(found) == 1 {
		return found[0], true
	}
	return Device{}, false
}

// Job is a gpuexec job that processes may run under: its gpuexec's pid and
// the owner and slug in its lock record.
type Job struct {
	Owner string `json:"owner,omitempty"`
	Slug  string `json:"slug,omitempty"`
	PID   int    `json:"pid"`
}

// Attributed is a Process with the gpuexec job it runs under, if any.
type Attributed struct {
	Process
	// Job is nil for a process not under gpuexec.
	Job *Job `json:"job"`
}

// MarshalJSON flattens the process's fields beside "job".
func (a Attributed) MarshalJSON() ([]byte, error) {
	type plain Process
	return json.Marshal(struct {
		plain
		Job *Job `json:"job"`
	}{plain(a.Process), a.Job})
}

// Describe is "pid 4711 python (17.2 GiB) not under gpuexec", or "... under
// gpuexec channels/ep12 (pid 4242)": the job's owner and slug, which its
// lock record says (anyone's word), shown escaped (see escape.Text).
func (a Attributed) Describe() string {
	s := fmt.Sprintf("pid %d %s (%s)", a.PID, a.Name, a.Used)
	if a.Job == nil {
		return s + " not under gpuexec"
	}
	if a.Job.Owner == "" && a.Job.Slug == "" {
		return s + fmt.Sprintf(" under gpuexec (pid %d)", a.Job.PID)
	}
	return s + fmt.Sprintf(" under gpuexec %s/%s (pid %d)", escape.Text(a.Job.Owner), escape.Text(a.Job.Slug), a.Job.PID)
}

// Attribute names, for each process, the gpuexec job it runs under: the
// job whose gpuexec is one of its ancestors (parent reads a process's
// parent) or whose process group (Job's group in groups) it is in. An
// ancestor that is a gpuexec of no known job (parent's name says so) is
// a job without owner and slug, unless a known job is further up.
func Attribute(ps []Process, jobs map[int]Job, groups map[int]int, up Ancestry) []Attributed {
	out := make([]Attributed, len(ps))
	for i, p := range ps {
		out[i] = Attributed{Process: p, Job: jobOf(p.PID, jobs, groups, up)}
	}
	return out
}

// Ancestry reads the process table: a process's parent, group and name.
type Ancestry interface {
	Parent(pid int) (int, bool)
	Group(pid int) (int, bool)
	Name(pid int) string
}

// maxDepth bounds the walk up a process's ancestors.
const maxDepth = 64

func jobOf(pid int, jobs map[int]Job, groups map[int]int, up Ancestry) *Job {
	if g, ok := up.Group(pid); ok && g > 0 {
		if holder, ok := groups[g]; ok {
			j := jobs[holder]
			return &j
		}
	}
	// A gpuexec of no known job may run under one that is known (a job
	// whose command runs gpuexec again, reentrant): the known one,
	// further up, is the job.
	var unknown *Job
	seen := map[int]bool{}
	for p, depth := pid, 0; p > 1 && depth < maxDepth && !seen[p]; depth++ {
		seen[p] = true
		if j, ok := jobs[p]; ok {
			return &j
		}
		if unknown == nil && p != pid && isGpuexec(up.Name(p)) {
			unknown = &Job{PID: p}
		}
		next, ok := up.Parent(p)
		if !ok {
			break
		}
		p = next
	}
	return unknown
}

func isGpuexec(name string) bool {
	n := strings.ToLower(name)
	return n == "gpuexec" || n == "gpuexec.exe"
}

// Card is a device with the processes on it, attributed: what `gpuexec
// status` shows of each GPU.
type Card struct {
	Device
	Processes []Attributed `json:"processes"`
}

// Cards pairs each device with its processes (matched by UUID).
func Cards(devs []Device, ps []Attributed) []Card {
	cards := make([]Card, len(devs))
	for i, d := range devs {
		cards[i] = Card{Device: d, Processes: []Attributed{}}
		for _, p := range ps {
			if p.Device == d.UUID {
				cards[i].Processes = append(cards[i].Processes, p)
			}
		}
	}
	return cards
}

// Describe is the card's lines for status: "GPU 0 NVIDIA GeForce RTX 3080:
// 9.6 GiB of 10.0 GiB used, 124 MiB free, 240 MiB reserved" (reserved
// where known; "; in MIG mode, ..." for a card in MIG mode), then one
// line per process.
func (c Card) Describe() string {
	m := c.Memory
	s := fmt.Sprintf("GPU %d %s: %s of %s used, %s free", c.Index, c.Name, m.Used, m.Total, m.Free)
	if m.Reserved.Known() {
		s += fmt.Sprintf(", %s reserved", m.Reserved)
	}
	if !m.Used.Known() && !m.Total.Known() && !m.Free.Known() {
		s = fmt.Sprintf("GPU %d %s: memory not reported", c.Index, c.Name)
	}
	switch c.MIG {
	case MIGOn:
		s += "; in MIG mode: these figures are the whole card's, not its instances'"
	case MIGUnknown:
		s += "; MIG mode unknown"
	}
	for _, p := range c.Processes {
		s += "\n  " + p.Describe()
	}
	return s
}
