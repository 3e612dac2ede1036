package report

import (
	"bufio"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/gpuexec/gpuexec/internal/journal"
)

//go:embed report.html.tmpl
var pageText string

// page is the HTML page's template: every value another user wrote goes
// through escape.Text (show) and then html/template's own escaping. It is
// parsed on first use, not at package init: init runs in every gpuexec
// process, every job's included (0.3–0.5 ms).
var page = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(template.FuncMap{
		"show":     show,
		"dur":      Duration,
		"hours":    Hours,
		"budget":   Budget,
		"ended":    Ended,
		"job":      JobName,
		"devices":  Devices,
		"rowname":  RowName,
		"outcomes": Outcomes,
		"when":     func(t time.Time) string { return t.UTC().Format(stamp) },
		"unusedms": func(p *int64) int64 { return deref(p) },
	}).Parse(pageText))
})

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// Timeline geometry, in SVG units.
const (
	svgLeft  = 150.0 // room for the row's name
	svgWidth = 1100.0
	svgRowH  = 30.0
	svgTop   = 22.0 // room for the time axis
	svgBarH  = 14.0
)

// palette is the number of owner colours (classes o0 to o9 in the
// template's style); owners past it reuse them.
const palette = 10

type htmlView struct {
	*Summary
	Colors     map[string]int
	Legend     []legendItem
	SVGW       float64
	SVGH       float64
	Left       float64
	Ticks      []tick
	RowsView   []rowView
	ReaderText []string
	Bars       int
	// OneLock is the lock when every row is of one lock (the timeline
	// then names the devices alone).
	OneLock string
	// BarsLeftOut counts the bars and waits of all rows left out.
	BarsLeftOut int
}

type legendItem struct {
	Name  string
	Class string
}

type tick struct {
	X     coord
	Label string
}

type rowView struct {
	Name  string
	Y     float64
	TextY float64
	LineY float64
	Bars  []barView
	Waits []barView
	Row
}

type barView struct {
	X, W, Y  coord
	X2       coord
	Class    string
	Title    string
	Outcome  journal.Outcome
	Deferred bool
	Marked   bool
}

func (s *Summary) view() *htmlView {
	v := &htmlView{Summary: s, Colors: map[string]int{}, SVGW: svgLeft + svgWidth + 40, Left: svgLeft}
	for i, o := range s.Owners {
		v.Colors[o.Name] = i % palette
		if i < 3*palette {
			v.Legend = append(v.Legend, legendItem{Name: o.Name, Class: fmt.Sprintf("o%d", i%palette)})
		}
	}
	span := s.Until.Sub(s.Since)
	x := func(t time.Time) float64 {
		if span <= 0 {
			return svgLeft
		}
		return svgLeft + svgWidth*float64(t.Sub(s.Since))/float64(span)
	}
	step := time.Hour
	for _, st := range []time.Duration{time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour} {
		step = st
		if span/st <= 12 {
			break
		}
	}
	format := "Jan 2 15:04"
	if step >= 24*time.Hour {
		format = "Mon Jan 2"
	}
	for t := s.Since.Truncate(step); !t.After(s.Until); t = t.Add(step) {
		if t.Before(s.Since) {
			continue
		}
		v.Ticks = append(v.Ticks, tick{X: coord(x(t)), Label: t.Format(format)})
		if len(v.Ticks) > 40 {
			break
		}
	}
	locks := map[string]bool{}
	for _, r := range s.Rows {
		locks[r.Lock] = true
	}
	if len(locks) == 1 {
		v.OneLock = s.Rows[0].Lock
	}
	for i, r := range s.Rows {
		y := svgTop + float64(i)*svgRowH
		name := RowName(r)
		if v.OneLock != "" {
			name = "whole lock"
			if r.Device != "" {
				name = "device " + show(r.Device)
			}
		}
		rv := rowView{Name: name, Y: y + 4, TextY: y + 15, LineY: y + svgBarH + 8, Row: r}
		for _, b := range r.Bars {
			c, ok := v.Colors[b.Owner]
			class := "bar"
			if ok {
				class += fmt.Sprintf(" o%d", c)
			} else {
				class += " other"
			}
			class += " out-" + string(b.Outcome)
			w := max(1.5, x(b.To)-x(b.From))
			// A bar too thin for an outline is marked by a red tick
			// above it instead (Marked).
			thin := w < 6
			if thin {
				class += " thin"
			}
			rv.Bars = append(rv.Bars, barView{X: coord(x(b.From)), W: coord(w), Y: coord(y + 4), Class: class, Outcome: b.Outcome,
				Marked: thin && b.Outcome != journal.OK,
				Title:  fmt.Sprintf("%s %s, %s to %s, held %s", JobName(b.Owner, b.Slug), b.Outcome, b.From.Format(stamp), b.To.Format("15:04"), Duration(b.To.Sub(b.From).Milliseconds()))})
			v.Bars++
		}
		for _, b := range r.Waits {
			wv := barView{X: coord(x(b.From)), X2: coord(max(x(b.From)+1, x(b.To))), Y: coord(y + svgBarH + 8), Outcome: b.Outcome,
				Deferred: !b.Outcome.Ran(), Class: "wait out-" + string(b.Outcome),
				Title: fmt.Sprintf("%s waited %s (%s)", JobName(b.Owner, b.Slug), Duration(b.To.Sub(b.From).Milliseconds()), b.Outcome)}
			rv.Waits = append(rv.Waits, wv)
		}
		v.BarsLeftOut += r.BarsLeftOut
		v.RowsView = append(v.RowsView, rv)
	}
	v.SVGH = svgTop + float64(len(s.Rows))*svgRowH + 6
	v.ReaderText = ReaderLines(s.Reader)
	return v
}

// WriteHTML writes s as one self-contained HTML page: inline style, an
// inline SVG timeline per card (one rect of class "bar" per job held,
// coloured by owner; waits as lines of class "wait"; deferred, failed and
// timed-out jobs marked), then the tables. It loads nothing: no script, no
// font, no image, no link. Every name another user wrote is escaped.
func WriteHTML(w io.Writer, s *Summary) error {
	// The template writes in many small pieces: buffered, they are few
	// writes to a file.
	bw := bufio.NewWriterSize(w, 64<<10)
	if err := page().Execute(bw, s.view()); err != nil {
		return err
	}
	return bw.Flush()
}

// WindowMS is the window's length.
func (s *Summary) WindowMS() int64 { return s.Until.Sub(s.Since).Milliseconds() }

// NotRunCount is the number of jobs not ok, listed or not.
func (s *Summary) NotRunCount() int { return len(s.NotRun) + s.NotRunLeftOut }

// UnusedCount is the number of jobs held unused, listed or not.
func (s *Summary) UnusedCount() int { return len(s.Unused) + s.UnusedLeftOut }

// TickY is where a thin bar's red tick goes: just above it.
func (b barView) TickY() coord { return b.Y - 4 }

// coord is an SVG coordinate, written with one decimal (a tenth of a
// unit is finer than a pixel; the page stays small).
type coord float64

func (c coord) String() string { return strconv.FormatFloat(float64(c), 'f', 1, 64) }

// MaxBars is the package's MaxBars, for the page.
func (v *htmlView) MaxBars() int { return MaxBars }
