// Package gputest is a fake nvidia-smi for tests on machines without a
// GPU. A test binary calls Main first thing in TestMain; run with Env
// naming a fixture file, the binary then answers as nvidia-smi would:
//
//	nvidia-smi --query-gpu=index,uuid,memory.free --format=csv,noheader,nounits
//
// prints one line per device with the fields asked, in the order asked,
// ", " between them, from the fixture, which the test rewrites (Write) to
// change what the card shows. The shapes (field values, failure messages,
// exit statuses) are those of real drivers; see the constructors.
package gputest

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Env names the fixture file; set, the test binary is nvidia-smi.
const Env = "GPUEXEC_TEST_FAKE_SMI"

// GPU is one device's fields, as nvidia-smi prints them with nounits
// ("10240", "[N/A]", "[Not Supported]").
//
// Reserved (memory.reserved, drivers from R510 on) and MIG
// (mig.mode.current: "Enabled", "Disabled", "[N/A]" on a card without
// MIG; drivers from R450 on) are fields a driver may not know: left ""
// on any device of a frame, a query that asks for it fails as such a
// driver fails ("Field \"memory.reserved\" is not a valid field to
// query.", exit 2) and takes no frame.
type GPU struct {
	Index, UUID, Name, BusID string
	Total, Used, Free        string
	Reserved, MIG            string
}

// App is one compute process. PIDFile, when set, is a file holding the pid
// (a process the test started), read at each call; PID is used otherwise.
type App struct {
	GPU     string // the device's UUID
	PID     int
	PIDFile string
	// Name is process_name as the driver reports it (a path on Linux
	// and Windows; whatever the process calls itself, newlines too),
	// printed only to a query that asks for it.
	Name string
	Used string // MiB, or "[N/A]" under Windows' WDDM
}

// Frame is what the card shows at one reading.
type Frame struct {
	GPUs []GPU
	Apps []App
	// Hang makes this --query-gpu reading hang (see Hanging).
	Hang bool
}

// Fixture is what the fake answers. Every --query-gpu call takes the next
// frame (the last one repeats); --query-compute-apps answers from the frame
// of the latest --query-gpu call (the first before any). Exit, Stdout and
// Stderr, when Exit is not 0, replace every answer (a failing driver); Hang
// makes every call hang.
type Fixture struct {
	Frames []Frame
	Exit   int
	Stdout string
	Stderr string
	Hang   bool
	// AppsFail, when set, is what --query-compute-apps prints before it
	// exits 15, while --query-gpu answers.
	AppsFail string
	// Raw, when set, is what every query prints, exiting 0: an
	// answer that is not what was asked.
	Raw string
	// Flood, when not 0, is how many bytes of rows every query prints
	// (the frame's first row, over and over) before it exits 0: an
	// answer no real driver gives.
	Flood int64
}

// Write writes f to path at once (rename), starting its frames over.
func Write(t testing.TB, path string, f Fixture) {
	t.Helper()
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path + ".calls")
	os.Remove(path + ".appcalls")
	os.Remove(path + ".hung")
	if err := os.WriteFile(path+".part", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".part", path); err != nil {
		t.Fatal(err)
	}
}

// Calls is how many --query-gpu calls the fake answered since the last
// Write.
func Calls(path string) int {
	b, _ := os.ReadFile(path + ".calls")
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// Main is the fake, when Env is set and the arguments are an nvidia-smi
// query (the same test binary may play other roles with Env inherited): it
// answers and exits.
func Main() {
	path := os.Getenv(Env)
	if path == "" || !isQuery(os.Args[1:]) {
		return
	}
	out, code := answer(path, os.Args[1:])
	os.Stdout.WriteString(out)
	os.Exit(code)
}

func isQuery(args []string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "--query-") {
			return true
		}
	}
	return false
}

// Hanging reports whether a call hung (Fixture.Hang, Frame.Hang) since
// the last Write.
func Hanging(path string) bool {
	_, err := os.Stat(path + ".hung")
	return err == nil
}

// HungPID is the pid of the fake that hung last since the last Write; 0
// when none did.
func HungPID(path string) int {
	b, _ := os.ReadFile(path + ".hung")
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// hang records this fake as hung and never answers.
func hang(path string) {
	os.WriteFile(path+".hung.part", []byte(strconv.Itoa(os.Getpid())), 0o644)
	os.Rename(path+".hung.part", path+".hung")
	time.Sleep(time.Hour)
}

// AppCalls is how many --query-compute-apps calls the fake answered since
// the last Write.
func AppCalls(path string) int {
	b, _ := os.ReadFile(path + ".appcalls")
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func answer(path string, args []string) (string, int) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "fake nvidia-smi: " + err.Error() + "\n", 2
	}
	var f Fixture
	if err := json.Unmarshal(b, &f); err != nil {
		return "fake nvidia-smi: " + err.Error() + "\n", 2
	}
	if f.Hang {
		hang(path)
	}
	if f.Exit != 0 {
		os.Stderr.WriteString(f.Stderr)
		return f.Stdout, f.Exit
	}
	if f.Raw != "" {
		return f.Raw, 0
	}
	var kind, fields string
	format := ""
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--query-gpu="):
			kind, fields = "gpu", strings.TrimPrefix(a, "--query-gpu=")
		case strings.HasPrefix(a, "--query-compute-apps="):
			kind, fields = "apps", strings.TrimPrefix(a, "--query-compute-apps=")
		case strings.HasPrefix(a, "--format="):
			format = strings.TrimPrefix(a, "--format=")
		}
	}
	if kind == "" || format != "csv,noheader,nounits" {
		return "fake nvidia-smi answers only --query-gpu/--query-compute-apps with --format=csv,noheader,nounits\n", 2
	}
	if len(f.Frames) == 0 {
		return "No devices were found\n", 6
	}
	calls := Calls(path)
	frame := f.Frames[min(max(calls-1, 0), len(f.Frames)-1)]
	var rows [][]string
	names := strings.Split(fields, ",")
	if kind == "gpu" {
		frame = f.Frames[min(calls, len(f.Frames)-1)]
		// A field the driver does not know fails the query before it
		// reads any device.
		for _, n := range names {
			for _, g := range frame.GPUs {
				if n == "memory.reserved" && g.Reserved == "" || n == "mig.mode.current" && g.MIG == "" {
					return fmt.Sprintf("Field \"%s\" is not a valid field to query.\n\n", n), 2
				}
			}
		}
		os.WriteFile(path+".calls", []byte(strconv.Itoa(calls+1)), 0o644)
		if frame.Hang {
			hang(path)
		}
		if len(frame.GPUs) == 0 {
			return "No devices were found\n", 6
		}
		for _, g := range frame.GPUs {
			row, bad := pick(names, map[string]string{
				"index": g.Index, "uuid": g.UUID, "name": g.Name, "pci.bus_id": g.BusID,
				"memory.total": g.Total, "memory.used": g.Used, "memory.free": g.Free,
				"memory.reserved": g.Reserved, "mig.mode.current": g.MIG,
				"count": strconv.Itoa(len(frame.GPUs)),
			})
			if bad != "" {
				return fmt.Sprintf("Field \"%s\" is not a valid field to query.\n\n", bad), 2
			}
			rows = append(rows, row)
		}
	} else {
		os.WriteFile(path+".appcalls", []byte(strconv.Itoa(AppCalls(path)+1)), 0o644)
		if f.AppsFail != "" {
			return f.AppsFail, 15
		}
		for _, a := range frame.Apps {
			pid := strconv.Itoa(a.PID)
			if a.PIDFile != "" {
				b, err := os.ReadFile(a.PIDFile)
				if err != nil {
					continue // not started yet
				}
				pid = strings.TrimSpace(string(b))
			}
			gpuName := ""
			for _, g := range frame.GPUs {
				if g.UUID == a.GPU {
					gpuName = g.Name
				}
			}
			row, bad := pick(names, map[string]string{
				"gpu_uuid": a.GPU, "pid": pid, "process_name": a.Name, "name": a.Name,
				"used_memory": a.Used, "used_gpu_memory": a.Used, "gpu_name": gpuName,
			})
			if bad != "" {
				return fmt.Sprintf("Field \"%s\" is not a valid field to query.\n\n", bad), 2
			}
			rows = append(rows, row)
		}
	}
	if f.Flood > 0 && len(rows) > 0 {
		flood(strings.Join(rows[0], ", ")+"\n", f.Flood)
		return "", 0
	}
	var s strings.Builder
	for _, r := range rows {
		s.WriteString(strings.Join(r, ", ") + "\n")
	}
	return s.String(), 0
}

// flood prints row over and over, n bytes in all, 64 KiB at a time.
func flood(row string, n int64) {
	chunk := []byte(strings.Repeat(row, max(1, 64<<10/len(row))))
	for n > 0 {
		w := chunk[:min(int64(len(chunk)), n)]
		if _, err := os.Stdout.Write(w); err != nil {
			return
		}
		n -= int64(len(w))
	}
}

func pick(names []string, fields map[string]string) ([]string, string) {
	row := make([]string, len(names))
	for i, n := range names {
		v, ok := fields[n]
		if !ok {
			return nil, n
		}
		row[i] = v
	}
	return row, ""
}

// UUIDs of the fixtures' devices, in the shape drivers print them.
const (
	UUID0 = "GPU-5a6c8e2f-0b1d-6b0d-3f0c-4d5e6f708192"
	UUID1 = "GPU-9e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7"
)

// RTX3080 is a GeForce RTX 3080 (10 GB) as a recent Linux driver (R510
// on) lists it, with used MiB in use: nvidia-smi reports 10240 MiB total,
// 240 MiB reserved by the driver and firmware, and free is what is left
// after used and reserved; MIG is [N/A] (a card without MIG).
func RTX3080(index int, uuid string, used int) GPU {
	return GPU{Index: strconv.Itoa(index), UUID: uuid, Name: "NVIDIA GeForce RTX 3080", BusID: fmt.Sprintf("00000000:%02X:00.0", index+1),
		Total: "10240", Used: strconv.Itoa(used), Free: strconv.Itoa(10240 - 240 - used), Reserved: "240", MIG: "[N/A]"}
}

// RTX4090 is a GeForce RTX 4090 (24 GB): 24564 MiB total, 342 reserved.
func RTX4090(index int, uuid string, used int) GPU {
	return GPU{Index: strconv.Itoa(index), UUID: uuid, Name: "NVIDIA GeForce RTX 4090", BusID: fmt.Sprintf("00000000:%02X:00.0", index+1),
		Total: "24564", Used: strconv.Itoa(used), Free: strconv.Itoa(24564 - 342 - used), Reserved: "342", MIG: "[N/A]"}
}

// H100 is an H100 80GB HBM3 (81559 MiB total, 542 reserved) with MIG
// "Enabled" or "Disabled". In MIG mode the memory figures are the whole
// card's, summed over its instances, as the driver gives them.
func H100(index int, uuid string, used int, mig string) GPU {
	return GPU{Index: strconv.Itoa(index), UUID: uuid, Name: "NVIDIA H100 80GB HBM3", BusID: fmt.Sprintf("00000000:%02X:00.0", index+0x18),
		Total: "81559", Used: strconv.Itoa(used), Free: strconv.Itoa(81559 - 542 - used), Reserved: "542", MIG: mig}
}

// OldDriver is g as a driver older than R510 lists it: it knows no
// memory.reserved, and its used memory includes what the driver keeps;
// with beforeMIG also older than R450, which knows no mig.mode.current.
func OldDriver(g GPU, beforeMIG bool) GPU {
	total, err1 := strconv.Atoi(g.Total)
	free, err2 := strconv.Atoi(g.Free)
	if err1 == nil && err2 == nil {
		g.Used = strconv.Itoa(total - free)
	}
	g.Reserved = ""
	if beforeMIG {
		g.MIG = ""
	}
	return g
}

// Failure shapes of real drivers.
var (
	// NoDevices: a driver with no GPU (nvidia-smi exits 6).
	NoDevices = Fixture{Exit: 6, Stdout: "No devices were found\n"}
	// DriverGone: the driver is not loaded or does not match (exit 9).
	DriverGone = Fixture{Exit: 9, Stdout: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n"}
	// Hung: nvidia-smi that never answers (a wedged driver).
	Hung = Fixture{Hang: true}
)
