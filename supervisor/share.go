package supervisor

import (
	"context"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/internal/proc"
	"github.com/gpuexec/gpuexec/lock"
)

// Sharing a card by budget (Config.Share): the lock lets a sharer join
// others on a device (lock.Options.ShareMiB); this gate decides, with the
// driver's figures, whether its budget fits; the peak sampler checks the
// budget while the job runs.

// EnvVRAM is the job's budget of video memory in MiB, set in the child's
// environment for any job with --vram, so that a framework can cap itself
// (PyTorch's per-process memory fraction, TensorFlow's memory limit).
const EnvVRAM = "GPUEXEC_VRAM_MIB"

// ExitOverBudget is gpuexec's status when it stopped a sharer whose
// measured video memory exceeded its budget (Config.VRAMEnforce). Not 124
// (--timeout), so that a scheduler tells the two apart (one wants more
// time, the other a larger --vram), not 125 (gpuexec failed), nor a
// 128+N that reads as a signal the job got from elsewhere.
const ExitOverBudget = 123

// minReserve and reservePercent make the default reserve (Config.Reserve
// 0): 5% of the device's memory, at least 512 MiB. Budgets are what the
// job's processes use as nvidia-smi measures them, CUDA contexts included,
// but a new process's context (300-500 MiB) appears only once it has
// started, allocators overshoot between two readings (2 s apart) before a
// sharer over budget is caught, and the driver itself takes memory that
// grows with the contexts on the device: the reserve is the room for
// that, so that sharers within their budgets do not run each other out
// of memory.
const (
	minReserve     gpu.MiB = 512
	reservePercent         = 5
)

// reserveOf is the reserve on a device of total MiB.
func reserveOf(set, total gpu.MiB) gpu.MiB {
	if set > 0 {
		return set
	}
	return max(minReserve, total*reservePercent/100)
}

// minOverMargin and overPercent make the margin above its budget a
// sharer's measured memory may reach before it is named over budget:
// 5% of the budget, at least 256 MiB. nvidia-smi's figure for a process
// moves with allocator rounding (PyTorch rounds large blocks up to 2 MiB,
// segments to 20 MiB) and with the driver's own bookkeeping for the
// context; a budget set from a measured peak (peak_vram_mib) is met
// within that, and a job truly over its budget is over by more.
const (
	minOverMargin gpu.MiB = 256
	overPercent           = 5
)

// overLimit is the most a sharer of budget MiB may be measured using.
func overLimit(budget gpu.MiB) gpu.MiB {
	return budget + max(minOverMargin, budget*overPercent/100)
}

// admitShared is lock.Options.AdmitShare: a device is admitted when it is
// a whole card (not in MIG mode), the budgets of the sharers on it, plus
// the memory in use on it by anything but those sharers' processes, plus
// this job's budget fit in its total less what the driver reserves and
// less the reserve, and the smaller of two readings shows at least the
// budget free.
func (g *gate) admitShared(ctx context.Context, cands []lock.Candidate) ([]bool, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ok := make([]bool, len(cands))
	devs, err := g.sample(ctx)
	if err != nil {
		return ok, fmt.Sprintf("%s shared: the card's memory is unknown (%v)", g.need, err)
	}
	ps, err := g.src.Processes(ctx)
	if err != nil {
		return ok, fmt.Sprintf("%s shared: the card's processes are unknown (%v)", g.need, err)
	}
	why := ""
	for i, c := range cands {
		targets := g.targets(c.Device, devs)
		ok[i] = len(targets) > 0
		for _, target := range targets {
			d, found := gpu.Find(devs, target)
			fits, reason := g.fits(d, found, target, c.Sharers, ps, c.Ahead)
			if fits {
				continue
			}
			ok[i] = false
			if why == "" {
				why = reason
			}
			break
		}
	}
	return ok, why
}

// fits decides one device for admitShared, saying why not. A sharer that
// would start ahead of the queue (ahead not nil) must also end before the
// head could start, by the sharers' deadlines and the room left to share
// now (see lock.Ahead.HeadStart).
func (g *gate) fits(d gpu.Device, found bool, name string, sharers []lock.Sharer, ps []gpu.Process, ahead *lock.Ahead) (bool, string) {
	if !found {
		return false, fmt.Sprintf("%s shared on GPU %s: nvidia-smi does not list it now", g.need, name)
	}
	if why := migWhy(d); why != "" {
		return false, fmt.Sprintf("%s shared on GPU %d: %s", g.need, d.Index, why)
	}
	m := d.Memory
	if !m.Total.Known() || !m.Used.Known() || !m.Free.Known() || !m.Reserved.Known() {
		return false, fmt.Sprintf("%s shared on GPU %d: its memory is unknown", g.need, d.Index)
	}
	sh, known := shareOf(d, sharers, ps, g.reserve)
	if !known {
		return false, fmt.Sprintf("%s shared on GPU %d: a sharer's budget cannot be read", g.need, d.Index)
	}
	if limit := m.Total - sh.reserved - sh.reserve; g.need > sh.room() {
		return false, fmt.Sprintf("%s shared on GPU %d: budgets %s (%d sharer(s)) + %s in use by others + %s > %s (%s less %s reserved by the driver and a %s reserve)",
			g.need, d.Index, sh.budgets, len(sharers), sh.other, g.need, limit, m.Total, sh.reserved, sh.reserve)
	}
	if m.Free < g.need {
		return false, fmt.Sprintf("%s shared on GPU %d: %s free", g.need, d.Index, m.Free)
	}
	if ahead != nil {
		// The head's room is reckoned with its own reserve, not this
		// one's.
		head := sh
		head.reserve = reserveOf(gpu.MiB(ahead.Reserve), m.Total)
		if !ahead.Passes(time.Now(), int64(head.room()), sharers) {
			return false, fmt.Sprintf("%s shared on GPU %d ahead of the queue: would not end before its head can start", g.need, d.Index)
		}
	}
	return true, ""
}

// share is how a device's memory stands for sharing: its total less what
// the driver reserves (no process ever has it) and the reserve, the
// sharers' budgets, and the memory in use by anything but the sharers'
// own processes.
type share struct {
	total, reserved, reserve, budgets, other gpu.MiB
}

// room is what is left for another sharer's budget.
func (s share) room() gpu.MiB { return s.total - s.reserved - s.reserve - s.budgets - s.other }

// shareOf works out how d stands with sharers on it, whose processes are
// among ps, and a reserve (0: the default); known is false when a
// sharer's budget cannot be read. Call with d's total, used and reserved
// known.
func shareOf(d gpu.Device, sharers []lock.Sharer, ps []gpu.Process, reserve gpu.MiB) (share, bool) {
	budgets, known := lock.Budget(sharers)
	return share{
		total:    d.Memory.Total,
		reserved: d.Memory.Reserved,
		reserve:  reserveOf(reserve, d.Memory.Total),
		budgets:  gpu.MiB(budgets),
		other:    max(d.Memory.Used-sharersUse(d, sharers, ps), 0),
	}, known
}

// addSharers adds the sharers on this host to jobs (by pid) and groups (by
// their jobs' process groups), for gpu.Attribute. A gone sharer's pid is
// a dead gpuexec's, which may be any process's by now: only its group
// counts, keyed in jobs by minus its number, which no process has. A
// sharer whose processes are not its own (lock.Sharer.Unattributed) is
// left out: its budget counts, and the memory of what it names stays in
// use by others (counted twice, if they are its job's: never too little).
func addSharers(jobs map[int]gpu.Job, groups map[int]int, sharers []lock.Sharer) {
	for _, s := range sharers {
		if s.PID <= 0 || s.Unattributed != "" || !proc.SameHost(s.Host) {
			continue
		}
		job := gpu.Job{Owner: s.Owner, Slug: s.Slug, PID: s.PID}
		switch {
		case !s.Gone:
			jobs[s.PID] = job
			if s.ChildPGID > 0 {
				groups[s.ChildPGID] = s.PID
			}
		case s.ChildPGID > 0:
			jobs[-s.ChildPGID] = job
			groups[s.ChildPGID] = -s.ChildPGID
		}
	}
}

// sharersUse is the memory that the sharers' own processes use on d, which
// their budgets already count.
func sharersUse(d gpu.Device, sharers []lock.Sharer, ps []gpu.Process) gpu.MiB {
	jobs, groups := map[int]gpu.Job{}, map[int]int{}
	addSharers(jobs, groups, sharers)
	var sum gpu.MiB
	for _, a := range gpu.Attribute(gpu.OnDevice(ps, d.UUID), jobs, groups, ancestry{}) {
		if a.Job != nil && a.Used.Known() {
			sum += a.Used
		}
	}
	return sum
}

// budgetCheck is what the peak sampler does with each reading of a
// sharer's job: note it in the sidecar for status, name the sharer in the
// log when it goes over its budget (and when it is back within), and
// report it (over) for --vram-enforce.
type budgetCheck struct {
	budget gpu.MiB
	held   jobLock
	cfg    Config
	over   chan gpu.MiB // one report, the first time it is over
	was    bool
	last   gpu.MiB
	told   bool
}

func newBudgetCheck(cfg Config, held jobLock) *budgetCheck {
	if !cfg.Share || cfg.VRAM <= 0 {
		return nil
	}
	return &budgetCheck{budget: cfg.VRAM, held: held, cfg: cfg, over: make(chan gpu.MiB, 1)}
}

// overC is closed over nothing: nil (never ready) without a check.
func (b *budgetCheck) overC() <-chan gpu.MiB {
	if b == nil {
		return nil
	}
	return b.over
}

// reading takes one measurement of the job's processes, in MiB.
func (b *budgetCheck) reading(used gpu.MiB) {
	if b == nil {
		return
	}
	over := used > overLimit(b.budget)
	log := b.cfg.Logger
	who := []any{"owner", b.cfg.Lock.Owner, "slug", b.cfg.Lock.Slug, "pid", os.Getpid(),
		"used_mib", int64(used), "budget_mib", int64(b.budget), "limit_mib", int64(overLimit(b.budget))}
	switch {
	case over && !b.was:
		log.Warn(fmt.Sprintf("sharer %s/%s (pid %d) uses %s of video memory, over its budget of %s", b.cfg.Lock.Owner, b.cfg.Lock.Slug, os.Getpid(), used, b.budget), who...)
		if !b.told {
			b.told = true
			b.over <- used
		}
	case !over && b.was:
		log.Info("sharer back within its video memory budget", who...)
	}
	if used != b.last || over != b.was {
		if n, ok := b.held.(noter); ok {
			if err := n.NoteUse(int64(used), over); err != nil {
				log.Debug("could not note the job's video memory in its sidecar", "error", err)
			}
		}
	}
	b.was, b.last = over, used
}

// noter is a jobLock that shows a sharer's use in status (a lock file's).
type noter interface {
	NoteUse(usedMiB int64, over bool) error
}

// ShareRoom is what is left to share on the card d, whose processes are
// ps: its total less what the driver reserves, the reserve
// (Config.Reserve's, 0 for the default), the sharers' budgets and the
// memory in use by anything but the sharers' own processes; known is
// false when a figure is unknown or d is in MIG mode (its figures are not
// what a sharer can have). status shows it.
func ShareRoom(d gpu.Device, sharers []lock.Sharer, ps []gpu.Process, reserve gpu.MiB) (room gpu.MiB, known bool) {
	if !d.Memory.Total.Known() || !d.Memory.Used.Known() || !d.Memory.Reserved.Known() || migWhy(d) != "" {
		return gpu.Unknown, false
	}
	sh, ok := shareOf(d, sharers, ps, reserve)
	if !ok {
		return gpu.Unknown, false
	}
	return sh.room(), true
}

// holdLimit is how long the job holds the lock at the latest, the lock's
// deadline: its timeout, then the kill-after grace before SIGKILL. Without
// a timeout, or with a kill-after of Forever (SIGKILL never comes), no end
// is promised: 0, no deadline. Sharers that backfill count on the
// deadlines of those on the card (see lock.Ahead).
func holdLimit(cfg Config) time.Duration {
	switch {
	case cfg.Timeout <= 0 || cfg.KillAfter == Forever || cfg.KillAfter < 0:
		return 0
	case cfg.KillAfter > math.MaxInt64-cfg.Timeout:
		return math.MaxInt64 // as long as a duration goes
	}
	return cfg.Timeout + cfg.KillAfter
}
