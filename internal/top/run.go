package top

import (
	"context"
	"time"

	"github.com/gdamore/tcell/v2"
)

// DefaultInterval is how often Run reads a new snapshot when given none.
const DefaultInterval = time.Second

// Run shows snapshots on screen until a quit key or the end of ctx: it
// draws snap()'s snapshot at once, then a new one every interval
// (DefaultInterval when interval is 0 or less), and redraws the last one
// on each resize. q, Q, Esc and Ctrl+C quit; Run then returns nil.
//
// screen must be initialised (Init) by the caller, who finalises it (Fini)
// after Run returns. snap is called on a goroutine of its own, one call at
// a time, so that a slow reading (nvidia-smi) never delays a key or a
// resize; a tick that comes while a call is still running is skipped. Run
// does not wait for a call in progress when it returns: the caller ends it
// (a context snap reads with, cancelled after Run).
func Run(ctx context.Context, screen tcell.Screen, snap func() Snapshot, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultInterval
	}
	events := make(chan tcell.Event, 16)
	quit := make(chan struct{})
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		screen.ChannelEvents(events, quit)
	}()
	defer func() { close(quit); <-pumped }()

	snaps := make(chan Snapshot, 1)
	reading := false
	read := func() {
		reading = true
		go func() { snaps <- snap() }()
	}

	var cur Snapshot
	shown := false
	draw := func() {
		screen.Clear()
		w, h := screen.Size()
		for y, l := range View(cur, w, h) {
			screen.PutStr(0, y, l)
		}
		screen.Show()
	}

	tick := time.NewTicker(interval)
	defer tick.Stop()
	read()
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-snaps:
			reading = false
			cur, shown = s, true
			draw()
		case <-tick.C:
			if !reading {
				read()
			}
		case ev, ok := <-events:
			if !ok {
				return nil // the screen was finalised
			}
			switch ev := ev.(type) {
			case *tcell.EventResize:
				screen.Sync()
				if shown {
					draw()
				}
			case *tcell.EventKey:
				if Quits(ev) {
					return nil
				}
			}
		}
	}
}

// Quits reports whether the key ev quits the view: q, Q, Esc or Ctrl+C.
func Quits(ev *tcell.EventKey) bool {
	switch ev.Key() {
	case tcell.KeyEscape, tcell.KeyCtrlC:
		return true
	case tcell.KeyRune:
		return ev.Rune() == 'q' || ev.Rune() == 'Q'
	}
	return false
}
