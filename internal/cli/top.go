package cli

// The top command: a live view of the lock, the cards and the last jobs
// (the view itself: package top), read as status reads them.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/gdamore/tcell/v2"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/gpuexec/gpuexec/internal/gpu"
	"github.com/gpuexec/gpuexec/internal/journal"
	"github.com/gpuexec/gpuexec/internal/osfile"
	"github.com/gpuexec/gpuexec/internal/top"
	"github.com/gpuexec/gpuexec/lock"
	"github.com/gpuexec/gpuexec/signals"
)

// What top reads, and how often.
const (
	// topCardsEvery is the least time between two readings of the cards:
	// nvidia-smi is a process started per reading (tens of milliseconds
	// of a core), which a reading each second would make most of top's
	// cost (docs/performance.md, "gpuexec top").
	topCardsEvery = 10 * time.Second
	// topCardsShare spaces the readings of a slow driver further: the
	// next comes after topCardsShare times what the last took, so that
	// they take under 1% of the time (0.8%) beside top's own cost.
	topCardsShare = 125
	// topRemoteEvery is the least time between two readings of a lock
	// that is not a file here (etcd): each reading starts a helper
	// process that connects to the cluster. The frame is redrawn every
	// --interval all the same, its durations counted on.
	topRemoteEvery = 5 * time.Second
	// topMinInterval is the shortest --interval: redraws more often show
	// nothing more and cost a core.
	topMinInterval = 100 * time.Millisecond
	// topJobs is how many of the journal's last jobs top shows.
	topJobs = 10
	// topClockSkew is how far past now a journal line may end and be
	// among the last jobs: another host's clock ahead of this one's.
	topClockSkew = time.Minute
	// topJournalTail bounds what top reads of each journal, from its
	// end, at each change of it: its last jobs, not its week.
	topJournalTail = 256 << 10
	// topTextWidth is the width the frame printed when the output is not
	// a terminal sizes its memory bars for.
	topTextWidth = 80
)

func topCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:        "top",
		Usage:       "a live view: who holds the lock, the queue, each GPU's memory and processes, the last jobs (q quits)",
		Description: inheritNote + "\nWithout a terminal on stdout it prints one frame and exits.",
		// --interval is top's alone: it reads its variable itself.
		Flags: append(subcommandFlags(
			lockFlag(), staleFlag(), gpusFlag(), gpuCountFlag(), nvidiaSMIFlag(), journalsFlag()),
			durationFlag("interval", top.DefaultInterval, "TOP_INTERVAL", "redraw this often (the GPUs are read at most every "+topCardsEvery.String()+")", nil),
		),
		Before:       inheritFlags,
		Action:       func(c *cli.Context) error { return topCmd(c, stdout) },
		OnUsageError: usageError,
	}
}

func topCmd(c *cli.Context, stdout io.Writer) error {
	if d := durationOf(c, "interval"); d < topMinInterval {
		return failed("--interval must be at least %s, got %s", topMinInterval, d)
	}
	o, b, err := lockCommand(c, true)
	if err != nil {
		return err
	}
	sm, err := smi(c)
	if err != nil {
		return err // a --nvidia-smi that names nothing
	}
	// A lock that cannot be read at all (its folder missing: a mistyped
	// --lock) is refused as status refuses it; later failures are shown.
	r, err := b.Inspect(o)
	if err != nil {
		return unreadable(o.Path, err)
	}
	rd := &topReader{o: o, b: b, smi: sm, tails: map[string]*journalTail{}, report: r, reportAt: time.Now()}
	switch {
	case slices.Contains(c.StringSlice("journal"), journalOff):
		rd.journalNote = "no journal read (--journal off)"
	case b != lock.Files && len(c.StringSlice("journal")) == 0:
		rd.journalNote = "an etcd lock has no journal of its own: --journal FILE names the jobs' journal"
	default:
		if rd.journals, err = journalPaths(c, o.Path, b); err != nil {
			return err
		}
	}

	// A signal that ends gpuexec (SIGTERM, SIGHUP: the ssh session gone)
	// stops a reading of the cards and ends the view with 128+N, the
	// terminal given back as it was.
	ctx, stop := signals.Ending(context.Background())
	defer stop()
	// A reading still running at a quit key is stopped too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rd.ctx = ctx

	f, ok := stdout.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		s := rd.snapshot()
		if sig := stop(); sig != nil {
			return readingInterrupted(sig)
		}
		for _, l := range top.Lines(s, topTextWidth) {
			fmt.Fprintln(stdout, l)
		}
		return nil
	}
	screen, err := tcell.NewScreen()
	if err == nil {
		err = screen.Init()
	}
	if err != nil {
		return failed("cannot draw on the terminal (TERM=%s): %v", lock.SafeName(os.Getenv("TERM")), err)
	}
	defer screen.Fini()
	if err := top.Run(ctx, screen, rd.snapshot, durationOf(c, "interval")); err != nil {
		return failed("%v", err)
	}
	if sig := stop(); sig != nil {
		return cli.Exit("", signals.ExitStatus(sig)) // 128+N, as for status
	}
	return nil
}

// topReader reads top's snapshots: a lock file at each (another lock at
// most every topRemoteEvery), the cards at most every topCardsEvery (and
// less often when nvidia-smi is slow: see topCardsShare), each
// journal's tail again when it changed. One snapshot at a time.
type topReader struct {
	ctx         context.Context
	o           lock.Options
	b           lock.Backend
	smi         *gpu.SMI // nil: none found
	journals    []string
	journalNote string

	report   *lock.Report
	lockErr  string
	reportAt time.Time

	cards    []gpu.Card
	cardsErr error
	cardsAt  time.Time     // when they were last read
	cardsGap time.Duration // then until the next reading
	tails    map[string]*journalTail
}

func (rd *topReader) snapshot() top.Snapshot {
	ctx := rd.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	now := time.Now()
	s := top.Snapshot{At: now, Path: rd.o.Path}
	if (rd.b == lock.Files && now.Sub(rd.reportAt) > time.Second/10) || now.Sub(rd.reportAt) >= topRemoteEvery {
		r, err := rd.b.Inspect(rd.o)
		rd.report, rd.lockErr, rd.reportAt = r, "", now
		if err != nil {
			rd.report, rd.lockErr = nil, unreadable(rd.o.Path, err).Error()
		}
	}
	s.Report, s.LockErr = rd.report, rd.lockErr
	var held []*lock.Status
	if s.Report != nil {
		held = s.Report.Locks
	}
	if rd.cardsAt.IsZero() || now.Sub(rd.cardsAt) >= rd.cardsGap {
		rd.cards, rd.cardsErr = nil, nil
		if rd.smi != nil {
			rd.cards, rd.cardsErr = readCards(ctx, rd.smi, rd.b, held)
		}
		// However slow the driver, its readings take at most
		// 1/topCardsShare of the time (wall time, taken as a bound of
		// nvidia-smi's CPU time: it mostly waits on the driver).
		rd.cardsAt, rd.cardsGap = now, max(topCardsEvery, time.Since(now)*topCardsShare)
	}
	s.Cards, s.CardsAt = rd.cards, rd.cardsAt
	if rd.cardsErr != nil {
		s.CardsErr = rd.cardsErr.Error()
	}
	s.Jobs, s.JournalNote = rd.lastJobs()
	return s
}

// lastJobs are the last topJobs jobs of the journals, oldest first, and a
// note on them ("" when there is nothing to say).
func (rd *topReader) lastJobs() ([]journal.Record, string) {
	if len(rd.journals) == 0 {
		return nil, rd.journalNote
	}
	all := &journal.Read{SetAside: map[string]int{}}
	var missing, broken []string
	for _, p := range rd.journals {
		t := rd.tails[p]
		if t == nil {
			t = &journalTail{path: p}
			rd.tails[p] = t
		}
		t.refresh()
		switch {
		case t.missing:
			missing = append(missing, p)
		case t.err != nil:
			broken = append(broken, t.err.Error())
		}
		all.Records = append(all.Records, t.records...)
		for k, n := range t.setAside {
			all.SetAside[k] += n
		}
	}
	all.Finish()
	// A line that ends in the future (any member may write one, dated
	// 9999) is not among the last jobs: ten of them would stand for
	// the last jobs for ever, hiding those that really ended.
	future := 0
	late := time.Now().Add(topClockSkew)
	for len(all.Records) > 0 && all.Records[len(all.Records)-1].Ended.After(late) {
		all.Records = all.Records[:len(all.Records)-1]
		future++
	}
	jobs := all.Records[max(0, len(all.Records)-topJobs):]
	var note string
	switch {
	case len(broken) > 0:
		note = "journal unreadable: " + broken[0]
	case len(missing) == len(rd.journals):
		note = "no journal yet at " + missing[0]
	case all.Lines() > 0 && future > 0:
		note = fmt.Sprintf("%d journal line(s) set aside (not records), %d ending in the future left out", all.Lines(), future)
	case all.Lines() > 0:
		note = fmt.Sprintf("%d journal line(s) set aside (not records)", all.Lines())
	case future > 0:
		note = fmt.Sprintf("%d journal line(s) ending in the future left out", future)
	}
	return jobs, note
}

// journalTail is the end of one journal, read again only when its size or
// mtime changed.
type journalTail struct {
	path     string
	size     int64
	mtime    time.Time
	records  []journal.Record
	setAside map[string]int
	missing  bool
	err      error
}

// refresh reads the last topJournalTail bytes of the journal again if it
// changed since the last read: its first line, cut by the bound, is left
// out.
func (t *journalTail) refresh() {
	f, err := osfile.OpenRegular(t.path, false)
	if errors.Is(err, fs.ErrNotExist) {
		*t = journalTail{path: t.path, missing: true}
		return
	}
	if err != nil {
		*t = journalTail{path: t.path, err: err}
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		*t = journalTail{path: t.path, err: err}
		return
	}
	if t.err == nil && !t.missing && fi.Size() == t.size && fi.ModTime().Equal(t.mtime) && t.setAside != nil {
		return
	}
	*t = journalTail{path: t.path, size: fi.Size(), mtime: fi.ModTime()}
	off := max(0, fi.Size()-topJournalTail)
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		t.err = err
		return
	}
	br := bufio.NewReader(io.LimitReader(f, topJournalTail))
	if off > 0 {
		// The first line read is the end of a line cut by the bound
		// (or an empty one): skipped, however long.
		for {
			_, err := br.ReadSlice('\n')
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
	}
	rd := &journal.Read{}
	if err := rd.From(br, journal.Window{}); err != nil {
		t.err = fmt.Errorf("%s: %w", t.path, err)
		return
	}
	t.records, t.setAside = rd.Records, rd.SetAside
}
