package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/gpuexec/gpuexec/internal/escape"
	"github.com/gpuexec/gpuexec/internal/journal"
)

// maxShown is the most bytes of one escaped name shown in a table.
const maxShown = 80

// show is s, another user's word, escaped (escape.Text) and cut to
// maxShown bytes ("…" says it was cut); "-" for empty.
func show(s string) string {
	if s == "" {
		return "-"
	}
	t := escape.Text(s)
	if len(t) > maxShown {
		n := maxShown
		for n > 0 && !utf8.RuneStart(t[n]) {
			n--
		}
		t = t[:n] + "…"
	}
	return t
}

// Duration is ms written short: 0s, 45s, 12m30s, 3h05m, 2d04h.
func Duration(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second && d > 0:
		return fmt.Sprintf("%dms", ms)
	case d < time.Minute:
		return fmt.Sprintf("%ds", int64(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int64(d/time.Minute), int64(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int64(d/time.Hour), int64(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int64(d/(24*time.Hour)), int64(d%(24*time.Hour)/time.Hour))
}

// Hours is GPU-milliseconds as GPU-hours, two decimals.
func Hours(ms int64) string { return fmt.Sprintf("%.2f", float64(ms)/3.6e6) }

const stamp = "2006-01-02 15:04"

// RowName is a timeline row's name: the lock, and the device.
func RowName(r Row) string {
	if r.Device == "" {
		return show(r.Lock)
	}
	return show(r.Lock) + " device " + show(r.Device)
}

// Ended is how a job ended, in a few words: "failed (status 3)",
// "interrupted (SIGINT)".
func Ended(j Job) string {
	switch {
	case j.Signal != "":
		return fmt.Sprintf("%s (%s)", j.Outcome, show(j.Signal))
	case j.Outcome == journal.Failed || j.Outcome == journal.Timeout:
		return fmt.Sprintf("%s (status %d)", j.Outcome, j.Status)
	}
	return string(j.Outcome)
}

// JobName is owner/slug, escaped.
func JobName(owner, slug string) string { return show(owner) + "/" + show(slug) }

// Budget is an owner's peak against its budget: "7100 / 8000 MiB",
// "- / 8000 MiB" when no peak was measured, "-" with neither.
func Budget(o Owner) string {
	peak := "-"
	if o.PeakMiB != nil {
		peak = fmt.Sprint(*o.PeakMiB)
	}
	switch {
	case o.BudgetMiB > 0:
		s := fmt.Sprintf("%s / %d MiB", peak, o.BudgetMiB)
		if o.OverBudget > 0 {
			s += fmt.Sprintf(" (%d over)", o.OverBudget)
		}
		return s
	case o.PeakMiB != nil:
		return peak + " MiB"
	}
	return "-"
}

// ReaderLines are what the reader read and set aside, said plainly, one
// sentence each.
func ReaderLines(r Reader) []string {
	var out []string
	switch len(r.Files) {
	case 0:
		out = append(out, "No journal file was read.")
	default:
		out = append(out, fmt.Sprintf("Read %d journal file(s): %s.", len(r.Files), shownList(r.Files)))
	}
	if len(r.Missing) > 0 {
		out = append(out, fmt.Sprintf("Not found (no job wrote there yet, or the name is wrong): %s.", shownList(r.Missing)))
	}
	if n := setAside(r.SetAside); n > 0 {
		reasons := make([]string, 0, len(r.SetAside))
		for k := range r.SetAside {
			reasons = append(reasons, k)
		}
		sort.Strings(reasons)
		parts := make([]string, 0, len(reasons))
		for _, k := range reasons {
			parts = append(parts, fmt.Sprintf("%d %s", r.SetAside[k], show(k)))
		}
		out = append(out, fmt.Sprintf("Set aside %d line(s) that were not valid records (%s): not counted here.", n, strings.Join(parts, ", ")))
	} else {
		out = append(out, "No line was set aside: every line was a valid record.")
	}
	if r.Truncated {
		out = append(out, fmt.Sprintf("The journal was too large: reading stopped at a bound (%d MiB read in all, %d records), so later jobs are missing here.", journal.MaxBytes>>20, journal.MaxRecords))
	}
	return out
}

func setAside(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

func shownList(names []string) string {
	const most = 8
	parts := make([]string, 0, most+1)
	for i, n := range names {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(names)-most))
			break
		}
		parts = append(parts, escape.Text(n)) // a path whole: the reader's own
	}
	return strings.Join(parts, ", ")
}

// WriteText writes s as text, for a terminal: every name another user
// wrote is escaped (escape.Text).
func WriteText(w io.Writer, s *Summary) error {
	bw := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }
	p("gpuexec report: %s to %s UTC (%s)", s.Since.Format(stamp), s.Until.Format(stamp), Duration(s.Until.Sub(s.Since).Milliseconds()))
	if len(s.OwnerFilter) > 0 {
		names := make([]string, len(s.OwnerFilter))
		for i, o := range s.OwnerFilter {
			names[i] = show(o)
		}
		p(", owners %s", strings.Join(names, ", "))
	}
	p("\n%d job(s), %s GPU-hours held: %s\n\n", s.Jobs, Hours(s.GPUHeldMS), Outcomes(s.ByOutcome))

	p("Per owner\n")
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "  owner\tjobs")
	for _, o := range journal.Outcomes {
		fmt.Fprintf(tw, "\t%s", o)
	}
	fmt.Fprint(tw, "\tGPU-hours\twait p50\tp90\tmax\tpeak / budget\n")
	for _, o := range s.Owners {
		fmt.Fprintf(tw, "  %s\t%d", show(o.Name), o.Jobs)
		for _, oc := range o.ByOutcome {
			fmt.Fprintf(tw, "\t%d", oc.Jobs)
		}
		fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s\t%s\n", Hours(o.GPUHeldMS), Duration(o.WaitP50MS), Duration(o.WaitP90MS), Duration(o.WaitMaxMS), Budget(o))
	}
	tw.Flush()
	if len(s.Owners) == 0 {
		p("  (no job)\n")
	}
	if s.OwnersLeftOut > 0 {
		p("  and %d more owner(s), with fewer GPU-hours\n", s.OwnersLeftOut)
	}

	p("\nNot ok: the jobs that did not run, or did not end well (%d)\n", len(s.NotRun)+s.NotRunLeftOut)
	jobs(bw, s.NotRun, s.NotRunLeftOut, false)

	p("\nCards: idle while someone waited (should be ~0), and idle overall\n")
	tw = tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "  card\tjobs\tbusy\tidle\tidle while waited\n")
	for _, r := range s.Rows {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", RowName(r), r.Jobs, Duration(r.BusyMS), Duration(r.IdleMS), Duration(r.IdleWhileWaitingMS))
	}
	tw.Flush()
	if len(s.Rows) == 0 {
		p("  (no job)\n")
	}
	if s.JobsOffRows > 0 {
		p("  and %d job(s) on more cards than a report shows (%d)\n", s.JobsOffRows, MaxRows)
	}

	p("\nHeld unused for %s or more (no video memory in use, as sampled) (%d)\n", Duration(s.UnusedMS), len(s.Unused)+s.UnusedLeftOut)
	jobs(bw, s.Unused, s.UnusedLeftOut, true)

	p("\n")
	for _, l := range ReaderLines(s.Reader) {
		p("%s\n", l)
	}
	p("Note: %s.\n", s.Outside)
	return bw.Flush()
}

func jobs(bw *bufio.Writer, js []Job, left int, unused bool) {
	if len(js) == 0 {
		fmt.Fprint(bw, "  (none)\n")
		return
	}
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	if unused {
		fmt.Fprint(tw, "  ended\tjob\tunused\theld\tcard\n")
	} else {
		fmt.Fprint(tw, "  ended\tjob\toutcome\twaited\theld\thost\n")
	}
	for _, j := range js {
		if unused {
			var u int64
			if j.UnusedMS != nil {
				u = *j.UnusedMS
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", j.Ended.UTC().Format(stamp), JobName(j.Owner, j.Slug), Duration(u), Duration(j.HeldMS), Devices(j))
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", j.Ended.UTC().Format(stamp), JobName(j.Owner, j.Slug), Ended(j), Duration(j.WaitedMS), Duration(j.HeldMS), show(j.Host))
	}
	tw.Flush()
	if left > 0 {
		fmt.Fprintf(bw, "  and %d earlier\n", left)
	}
}

// Devices is a job's devices ("0,1"), or "whole lock".
func Devices(j Job) string {
	if len(j.Devices) == 0 {
		return "whole lock"
	}
	parts := make([]string, len(j.Devices))
	for i, d := range j.Devices {
		parts[i] = show(d)
	}
	return "device " + strings.Join(parts, ",")
}

// Outcomes is counts by outcome in words: "6 ok, 1 failed, ...".
func Outcomes(cs []OutcomeCount) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%d %s", c.Jobs, c.Outcome)
	}
	return strings.Join(parts, ", ")
}

// WriteJSON writes s as one JSON object and a newline; every string is
// as the journal held it, with the runes that are not printable written
// as JSON escapes (escape.JSON).
func WriteJSON(w io.Writer, s *Summary) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.Write(escape.JSON(b))
	buf.WriteByte('\n')
	_, err = w.Write(buf.Bytes())
	return err
}
