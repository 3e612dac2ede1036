package supervisor

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gpuexec/gpuexec/internal/gpu"
)

// Peak sampling while the job runs: the first reading peakFirst into the
// job (a job that ends sooner, `gpuexec -- true`, runs no nvidia-smi at
// all), then every peakEvery (its cost: docs/performance.md, "Figures the
// code rests on"); frameworks keep what their allocator
// reserved (PyTorch's caching allocator) so the peak is a plateau that
// lasts well over 2 s. A spike shorter than peakEvery can be missed: the
// figure is a lower bound.
const (
	peakFirst = time.Second
	peakEvery = 2 * time.Second
)

// peak samples the video memory the job's processes use while it runs.
type peak struct {
	end     chan struct{}
	done    chan struct{}
	max     gpu.MiB
	sampled bool // some reading was had
	// unknown: a process of the job was listed without its memory
	// (Windows' WDDM).
	unknown bool
	// unused is how long, as sampled, the job's processes used no video
	// memory: the time since the previous reading (or the job's start)
	// counted for each reading of 0; idle is the run of it that is going
	// on. warned says that the idle warning was given (see idleWarn).
	unused, idle time.Duration
	last         time.Time
	warned       bool
	idleWarn     func(idle time.Duration) bool
}

// watchPeak starts sampling for the job of cfg whose gpuexec is this
// process and whose process group is pgid; nil without a source
// (cfg.GPU). It gives the idle warning (cfg.IdleWarn) when due.
func watchPeak(cfg Config, pgid int, bc *budgetCheck) *peak {
	src := cfg.GPU
	if src == nil {
		return nil
	}
	p := &peak{end: make(chan struct{}), done: make(chan struct{}), last: time.Now()}
	if cfg.IdleWarn > 0 && !cfg.Share {
		p.idleWarn = func(idle time.Duration) bool {
			if idle < cfg.IdleWarn {
				return false
			}
			if log := cfg.Logger; log != nil {
				log.Warn(fmt.Sprintf("job %s/%s has held the GPU for %s without using any video memory (--idle-warn %s): "+
					"the lock is held by something that does not use the GPU",
					cfg.Lock.Owner, cfg.Lock.Slug, idle.Round(time.Second), cfg.IdleWarn))
			}
			return true
		}
	}
	self := os.Getpid()
	jobs := map[int]gpu.Job{self: {PID: self}}
	groups := map[int]int{}
	if pgid > 0 {
		groups[pgid] = self
	}
	go func() {
		defer close(p.done)
		t := time.NewTimer(peakFirst)
		defer t.Stop()
		for {
			select {
			case <-p.end:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-p.end:
					cancel()
				case <-ctx.Done():
				}
			}()
			ps, err := src.Processes(ctx)
			cancel()
			if err == nil {
				if sum, known := p.add(gpu.Attribute(ps, jobs, groups, ancestry{}), self); known {
					bc.reading(sum)
				}
			}
			t.Reset(peakEvery)
		}
	}()
	return p
}

// add takes one reading: the sum of the job's processes' memory (known
// false when a process of the job was listed without its memory).
func (p *peak) add(ps []gpu.Attributed, self int) (sum gpu.MiB, known bool) {
	known = true
	for _, a := range ps {
		if a.Job == nil || a.Job.PID != self {
			continue
		}
		if !a.Used.Known() {
			p.unknown, known = true, false
			continue
		}
		sum += a.Used
	}
	p.sampled = true
	p.max = max(p.max, sum)
	now := time.Now()
	if known && sum == 0 {
		d := now.Sub(p.last)
		p.unused += d
		p.idle += d
		if !p.warned && p.idleWarn != nil {
			p.warned = p.idleWarn(p.idle)
		}
	} else {
		p.idle = 0
	}
	p.last = now
	return sum, known
}

// stop ends the sampling and returns the fields for the "job exited" line:
// peak_vram_mib, or why there is no figure.
func (p *peak) stop() []any {
	if p == nil {
		return nil
	}
	close(p.end)
	<-p.done
	switch {
	case p.unknown:
		return []any{"peak_vram", "unknown (the driver does not report per-process memory)"}
	case p.sampled:
		return []any{"peak_vram_mib", int64(p.max)}
	}
	return nil
}
