package cli

// The flags and status lines that read the cards themselves (nvidia-smi):
// --vram, --nvidia-smi, --gpus all without --gpu-count.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/lock"
	"github.com/gpuexec/gpuexec/supervisor"
)

func nvidiaSMIFlag() cli.Flag {
	return &cli.StringFlag{Name: "nvidia-smi", EnvVars: env("NVIDIA_SMI"), TakesFile: true,
		Usage: "the nvidia-smi to read the GPUs with (default: found on PATH, or where the driver installs it)"}
}

func shareFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "share", EnvVars: env("SHARE"),
			Usage: "with --vram: run beside other --share jobs on the GPU while their budgets fit (the job's budget is --vram)"},
		reserveFlag(),
		&cli.BoolFlag{Name: "vram-enforce", EnvVars: env("VRAM_ENFORCE"),
			Usage: "with --share: stop the job (exit 123) when it uses more video memory than its budget"},
	}
}

func reserveFlag() cli.Flag {
	return &cli.StringFlag{Name: "reserve", EnvVars: env("RESERVE"),
		Usage: "with --share: video memory sharers leave free on each GPU, `SIZE` (default: 5% of the GPU, at least 512M)"}
}

// statusReserveFlag is status's --reserve: it runs no job, but says how
// much is left to share on a GPU that --share jobs hold, which is what
// their budgets leave of the card's total less the reserve.
func statusReserveFlag() cli.Flag {
	return &cli.StringFlag{Name: "reserve", EnvVars: env("RESERVE"),
		Usage: "the --reserve the --share jobs run with, for what is left to share on a GPU they hold: `SIZE` (default: 5% of the GPU, at least 512M)"}
}

// sizeOf is the size flag name (--vram, --reserve) in MiB; 0 when not
// given (for --reserve: the default).
func sizeOf(c *cli.Context, name string) (gpu.MiB, error) {
	v := c.String(name)
	if v == "" {
		return 0, nil
	}
	n, err := gpu.ParseSize(v)
	if err != nil {
		return 0, failed("--%s: %v", name, err)
	}
	return n, nil
}

// shareRooms is what is left to share on the card of each lock of r held
// in shared mode, by the lock's index in r.Locks, and the human lines,
// where the card the lock stands for is known: a device's lock, or the
// one card of a single lock.
func shareRooms(r *lock.Report, cards []gpu.Card, reserve gpu.MiB) (map[int]int64, []string) {
	var lines []string
	rooms := map[int]int64{}
	for i, st := range r.Locks {
		if st.Info == nil || !st.Info.Share || st.State != lock.StateHeld {
			continue
		}
		var card *gpu.Card
		for k := range cards {
			if st.Device == "" && len(cards) == 1 || st.Device != "" && (strconv.Itoa(cards[k].Index) == st.Device || cards[k].UUID == st.Device) {
				card = &cards[k]
			}
		}
		if card == nil {
			continue
		}
		ps := make([]gpu.Process, len(card.Processes))
		for k, p := range card.Processes {
			ps[k] = p.Process
		}
		room, known := supervisor.ShareRoom(card.Device, st.Sharers, ps, reserve)
		if known {
			rooms[i] = int64(room)
			used, _ := lock.Budget(st.Sharers)
			lines = append(lines, fmt.Sprintf("GPU %d shared: %s of budgets, %s left to share", card.Index, gpu.MiB(used), max(room, 0)))
		}
	}
	return rooms, lines
}

func vramFlag() cli.Flag {
	return &cli.StringFlag{Name: "vram", EnvVars: env("VRAM"),
		Usage: "start only when the GPU has this much free video memory, as nvidia-smi reports it: `SIZE` such as 10G, 512M or 12000MiB"}
}

// smi is the nvidia-smi to read the cards with: --nvidia-smi's (which must
// exist), else one found on PATH or where the driver installs it; nil
// (and no error) when there is none and none was named.
func smi(c *cli.Context) (*gpu.SMI, error) {
	s, err := gpu.Locate(c.String("nvidia-smi"))
	switch {
	case err == nil:
		return s, nil
	case c.String("nvidia-smi") != "":
		return nil, failed("--nvidia-smi %q: %v", c.String("nvidia-smi"), err)
	}
	return nil, nil
}

// notFound says why no nvidia-smi was found.
func notFound() error {
	_, err := gpu.Locate("")
	if err == nil {
		err = gpu.ErrNoTool // it appeared meanwhile
	}
	return err
}

// discovered is --gpus all without --gpu-count: the devices nvidia-smi
// lists, by index.
func discovered(ctx context.Context, c *cli.Context) ([]string, error) {
	const how = "--gpus all needs --gpu-count N (or GPUEXEC_GPU_COUNT) or a working nvidia-smi to count the GPUs"
	s, err := smi(c)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, failed("%s: %v", how, notFound())
	}
	devs, err := s.Devices(ctx)
	if err != nil {
		return nil, failed("%s: %v", how, err)
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = strconv.Itoa(d.Index)
	}
	return names, nil
}

// deviceIndexes is a --gpus list (or the device of a --lock that names
// one: flag says which, for messages) with each GPU named by nvidia-smi's
// index, as a device's lock is (one card, one lock): a UUID, or a unique
// prefix of one (GPU-5a6c...), is mapped to the index of the GPU it names,
// which needs a working nvidia-smi; and where nvidia-smi answers, every
// index must be one it lists. Without nvidia-smi indexes are taken as
// written (lock.ParseDevices checks them).
func deviceIndexes(ctx context.Context, c *cli.Context, flag, list string) (string, error) {
	names := strings.Split(list, ",")
	uuids := false
	for i, n := range names {
		names[i] = strings.TrimSpace(n)
		uuids = uuids || strings.HasPrefix(strings.ToUpper(names[i]), "GPU-")
	}
	s, err := smi(c)
	if err != nil {
		return "", err
	}
	var devs []gpu.Device
	if s != nil {
		devs, err = s.Devices(ctx)
	}
	switch {
	case uuids && s == nil:
		return "", failed("%s names a GPU by its UUID, which needs nvidia-smi to tell its index (one card is one lock): %v; or give the index", flag, notFound())
	case uuids && err != nil:
		return "", failed("%s names a GPU by its UUID, which needs nvidia-smi to tell its index (one card is one lock): %v", flag, err)
	case s == nil || err != nil && !errors.Is(err, gpu.ErrNoDevices):
		// Nothing to check indexes against: they are what they say.
		return strings.Join(names, ","), nil
	}
	for i, n := range names {
		if !strings.HasPrefix(strings.ToUpper(n), "GPU-") && strings.Trim(n, "0123456789") != "" {
			continue // no GPU's name: lock.ParseDevices says why
		}
		d, ok := gpu.Find(devs, n)
		if !ok {
			return "", failed("%s: %q names no GPU nvidia-smi lists (it lists %s)", flag, lock.SafeName(n), listedIndexes(devs))
		}
		names[i] = strconv.Itoa(d.Index)
	}
	return strings.Join(names, ","), nil
}

// listedIndexes names devs by index for a message: "0, 1", or "none".
func listedIndexes(devs []gpu.Device) string {
	if len(devs) == 0 {
		return "none"
	}
	s := make([]string, len(devs))
	for i, d := range devs {
		s[i] = strconv.Itoa(d.Index)
	}
	return strings.Join(s, ", ")
}

// gpuSource is the job's source of GPU facts: without --vram and
// --nvidia-smi, one that looks for nvidia-smi only when first asked;
// else the nvidia-smi found, an error for a --nvidia-smi that names
// nothing, and a refusal of --vram without nvidia-smi.
func gpuSource(c *cli.Context, vram gpu.MiB) (gpu.Source, error) {
	if vram == 0 && c.String("nvidia-smi") == "" {
		// Only the peak sampler may ask, a second into the job: the
		// search of PATH waits until then.
		return gpu.Later(), nil
	}
	s, err := smi(c)
	switch {
	case err != nil:
		return nil, err
	case s == nil && vram > 0:
		return nil, failed("--vram needs nvidia-smi: %v", notFound())
	case s == nil:
		return nil, nil
	}
	return s, nil
}

// statusCards reads the cards for status, their processes attributed by
// the locks of backend b that status read, held (see supervisor.Attribute):
// nil, nil without nvidia-smi; the cards without processes and an error
// when only the processes could not be read.
func statusCards(ctx context.Context, c *cli.Context, b lock.Backend, held []*lock.Status) ([]gpu.Card, error) {
	s, err := smi(c)
	if err != nil || s == nil {
		return nil, err
	}
	return readCards(ctx, s, b, held)
}

// readCards is statusCards with the nvidia-smi s found: a caller that
// reads the cards again and again (top) keeps s, which remembers the
// fields its driver does not know, and asks for them no more.
func readCards(ctx context.Context, s *gpu.SMI, b lock.Backend, held []*lock.Status) ([]gpu.Card, error) {
	devs, err := s.Devices(ctx)
	if errors.Is(err, gpu.ErrNoDevices) {
		return []gpu.Card{}, nil
	}
	if err != nil {
		return nil, err
	}
	ps, err := s.Processes(ctx)
	if err != nil {
		// The cards without their processes (null in JSON), and why.
		cards := gpu.Cards(devs, nil)
		for i := range cards {
			cards[i].Processes = nil
		}
		return cards, fmt.Errorf("processes unknown: %w", err)
	}
	return gpu.Cards(devs, supervisor.Attribute(ps, b, held)), nil
}

// printCards adds the cards to status's human output.
func printCards(stdout io.Writer, cards []gpu.Card, err error) {
	switch {
	case err != nil && len(cards) > 0:
		for _, card := range cards {
			fmt.Fprintln(stdout, card.Describe())
		}
		fmt.Fprintf(stdout, "GPU %v\n", err)
	case err != nil:
		fmt.Fprintf(stdout, "GPUs: unknown (%v)\n", err)
	case cards == nil:
	case len(cards) == 0:
		fmt.Fprintln(stdout, "GPUs: none (nvidia-smi found no GPU)")
	default:
		for _, card := range cards {
			fmt.Fprintln(stdout, card.Describe())
		}
	}
}
