package supervisor

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/lock"
)

// What the supervisor reads from the cards (Config.GPU): before the start,
// whether the device has the free memory the job asked for (Config.VRAM);
// while the job runs, how much its own processes use, for the "job exited"
// line.

// EnvDeviceOrder makes CUDA number the devices as nvidia-smi does (PCI bus
// order), so that CUDA_VISIBLE_DEVICES=1 is nvidia-smi's GPU 1; it is set
// with CUDA_VISIBLE_DEVICES, and for a job with --vram (whose memory was
// checked in nvidia-smi's numbering) unless its environment sets it.
const EnvDeviceOrder = "CUDA_DEVICE_ORDER"

// validateVRAM is Validate's part for Config.GPU, VRAM, Share, Reserve and
// VRAMEnforce.
func (cfg Config) validateVRAM() error {
	switch {
	case cfg.VRAM < 0:
		return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf("must not be negative, got %d MiB", cfg.VRAM)}
	case cfg.Share && cfg.VRAM == 0:
		return &lock.OptionError{Option: "share", Problem: "needs --vram SIZE, the job's budget"}
	case cfg.VRAMEnforce && !cfg.Share:
		return &lock.OptionError{Option: "vram-enforce", Problem: "checks a sharer's budget: it needs --share"}
	case cfg.Reserve < 0:
		return &lock.OptionError{Option: "reserve", Problem: fmt.Sprintf("must not be negative, got %d MiB", cfg.Reserve)}
	case cfg.Reserve > 0 && !cfg.Share:
		return &lock.OptionError{Option: "reserve", Problem: "is what sharers leave free: it needs --share"}
	case cfg.VRAM == 0:
		return nil
	case cfg.GPU == nil:
		return &lock.OptionError{Option: "vram", Problem: "needs nvidia-smi, and none was found"}
	case !machineLocal(cfg.Backend) && cfg.Share:
		return &lock.OptionError{Option: "share", Problem: "shares this machine's GPUs, so it needs a lock file, not an etcd:// lock"}
	case !machineLocal(cfg.Backend):
		return &lock.OptionError{Option: "vram", Problem: "is checked on this machine's GPUs, so it needs a lock file, not an etcd:// lock"}
	}
	return nil
}

// CheckGPUs asks Config.GPU once, when the job needs free memory
// (Config.VRAM), whether every device the job may take is one the driver
// lists and reports free memory for, and whether the size can ever be
// free on it (on enough of them): an *lock.OptionError naming "vram" when
// not (no working nvidia-smi, an ambiguous listing, no such GPU, a device
// that does not report its free memory or its MIG mode, one in MIG mode,
// one whose total less what the driver reserves, and for a sharer less
// the reserve, is smaller than the size). Run does not call it: a program
// calls it after Validate, to refuse at once what could never start.
func (cfg Config) CheckGPUs(ctx context.Context) error {
	if cfg.VRAM <= 0 || cfg.GPU == nil {
		return nil
	}
	devs, err := cfg.GPU.Devices(ctx)
	if err != nil {
		return &lock.OptionError{Option: "vram", Problem: "cannot be checked: " + err.Error()}
	}
	names := cfg.vramDevices()
	if names == nil {
		names = indexes(devs)
	}
	if len(names) == 0 {
		return &lock.OptionError{Option: "vram", Problem: "cannot be checked: " + EnvCUDA + " is empty, so the job sees no GPU"}
	}
	fits := 0
	var small, mig []string
	for _, name := range names {
		d, ok := gpu.Find(devs, name)
		if !ok {
			return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf("cannot be checked: nvidia-smi lists no GPU %q (it lists %s)", name, listed(devs))}
		}
		if !d.Memory.Free.Known() {
			return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf("cannot be checked: GPU %d (%s) does not report its free memory", d.Index, d.Name)}
		}
		switch d.MIG {
		case gpu.MIGUnknown:
			return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf("cannot be checked: GPU %d (%s) does not say whether it is in MIG mode", d.Index, d.Name)}
		case gpu.MIGOn:
			mig = append(mig, strconv.Itoa(d.Index))
			continue
		}
		if never := cfg.neverFree(d.Memory); never != "" {
			small = append(small, fmt.Sprintf("GPU %d has %s", d.Index, never))
			continue
		}
		fits++
	}
	// A job waits for one device of a device set, but for every device
	// it sees without one.
	single := len(cfg.Lock.Devices) == 0
	if len(mig) > 0 && (fits == 0 || single) {
		return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf(
			"cannot be checked on GPU %s: in MIG mode nvidia-smi gives the whole card's memory, not that of the MIG instance a job runs in; "+
				"run the job without --vram and --share (the lock alone keeps jobs apart), or turn MIG off (nvidia-smi -i %s -mig 0)",
			strings.Join(mig, ", "), strings.Join(mig, ","))}
	}
	if fits == 0 || (single && len(small) > 0) {
		return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf("%s can never be free: %s", cfg.VRAM, strings.Join(small, ", "))}
	}
	// ... and for Need of them at once.
	if need := max(cfg.Lock.Need, 1); fits < need {
		for _, n := range mig {
			small = append(small, "GPU "+n+" is in MIG mode")
		}
		return &lock.OptionError{Option: "vram", Problem: fmt.Sprintf("%s can never be free on %d GPUs at once (--need %d): %s", cfg.VRAM, need, need, strings.Join(small, ", "))}
	}
	return nil
}

// neverFree says how much a device of memory m can ever give the job,
// when that is less than it needs ("9.8 GiB (10.0 GiB less 240 MiB
// reserved by the driver)"; for a sharer also less the reserve); "" when
// it can give enough or its total is unknown.
func (cfg Config) neverFree(m gpu.Memory) string {
	room := m.Usable()
	if !room.Known() {
		return ""
	}
	var less []string
	if m.Reserved.Known() && m.Reserved > 0 {
		less = append(less, m.Reserved.String()+" reserved by the driver")
	}
	what := ""
	if cfg.Share {
		reserve := reserveOf(cfg.Reserve, m.Total)
		room -= reserve
		less = append(less, "a "+reserve.String()+" reserve")
		what = " to share"
	}
	if room >= cfg.VRAM {
		return ""
	}
	if len(less) == 0 {
		return fmt.Sprintf("%s in all", m.Total)
	}
	return fmt.Sprintf("%s%s (%s less %s)", max(room, 0), what, m.Total, strings.Join(less, " and "))
}

// vramDevices are the devices the job may take: with Lock.Devices, those;
// else the ones it will see (visibleDevices).
func (cfg Config) vramDevices() []string {
	if len(cfg.Lock.Devices) > 0 {
		return cfg.Lock.Devices
	}
	return cfg.visibleDevices()
}

// visibleDevices are the devices a job without Lock.Devices sees: those
// CUDA_VISIBLE_DEVICES names in its environment, else nil, meaning every
// device.
func (cfg Config) visibleDevices() []string {
	v, ok := lookupEnv(cfg.Env, EnvCUDA)
	if !ok {
		return nil
	}
	var names []string
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if names == nil {
		names = []string{} // CUDA_VISIBLE_DEVICES="": no device at all
	}
	return names
}

// lookupEnv finds k in env (nil: gpuexec's own), the last setting winning.
func lookupEnv(env []string, k string) (string, bool) {
	if env == nil {
		return os.LookupEnv(k)
	}
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], k+"="); ok {
			return v, true
		}
	}
	return "", false
}

func listed(devs []gpu.Device) string { return strings.Join(indexes(devs), ", ") }

// indexes names every device by its index.
func indexes(devs []gpu.Device) []string {
	s := make([]string, len(devs))
	for i, d := range devs {
		s[i] = strconv.Itoa(d.Index)
	}
	return s
}
