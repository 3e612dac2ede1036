package cli

import (
	"errors"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuexec/gpuexec/supervisor"
)

// Duration flags as gpuexec reads them, on the command line and from their
// GPUEXEC_* variables: Go's durations (500ms, 90s, 1h30m), and besides
//
//   - a positive value below a nanosecond (0.0000000001s) is 1ns, as
//     timeout(1) rounds it up: never 0, which for --timeout means none;
//   - a value written with a leading "-" is refused, however small
//     (-0.0000000001s, which Go reads as 0);
//   - a value past Go's longest duration (10000000h) says so, rather than
//     that it is no duration;
//   - a flag may take a word for "without end" (--wait forever,
//     --kill-after never).

// endless is what a duration flag takes for "without end": its words
// (any case) and the duration they stand for.
type endless struct {
	words []string
	value time.Duration
	// hint ends the refusal of a negative or too long value: how to
	// say "without end" ("to wait without end, write forever").
	hint string
}

// durationValue is a duration flag's value (a cli.Generic, and a
// flag.Getter whose Get is the time.Duration).
type durationValue struct {
	d       time.Duration
	endless *endless // nil: the flag takes no word
}

func (v *durationValue) Set(s string) error {
	d, err := parseDuration(s, v.endless)
	if err != nil {
		return err
	}
	v.d = d
	return nil
}

// String is the value as parseDuration reads it back: Go's spelling, or
// the first word of endless for its value.
func (v *durationValue) String() string {
	if v.endless != nil && v.d == v.endless.value {
		return v.endless.words[0]
	}
	return v.d.String()
}

func (v *durationValue) Get() any { return v.d }

// durationFlag is a duration flag read by parseDuration, with e's words
// for "without end" (nil: none), and its variable GPUEXEC_<variable>.
func durationFlag(name string, value time.Duration, variable, usage string, e *endless) *cli.GenericFlag {
	return &cli.GenericFlag{Name: name, Value: &durationValue{d: value, endless: e}, EnvVars: env(variable), Usage: usage}
}

// isDurationFlag reports whether f is a durationFlag.
func isDurationFlag(f cli.Flag) bool {
	g, ok := f.(*cli.GenericFlag)
	if !ok {
		return false
	}
	_, ok = g.Value.(*durationValue)
	return ok
}

// durationOf is the duration flag name of c's command (see durationFlag);
// 0 if it has none.
func durationOf(c *cli.Context, name string) time.Duration {
	if v, ok := c.Generic(name).(*durationValue); ok {
		return v.d
	}
	return 0
}

// durationSyntaxRE is Go's duration syntax (time.ParseDuration): what it
// matches and ParseDuration refuses is past the longest duration.
var durationSyntaxRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^\+?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$`)
})

// longest is Go's longest duration as users write it, rounded down.
const longest = "2562047h"

// parseDuration reads s as a duration flag does (see durationFlag). Its
// errors are what follows the quoted value in the one line that refuses
// it ("\"5\" is not a duration; ...").
func parseDuration(s string, e *endless) (time.Duration, error) {
	if e != nil {
		for _, w := range e.words {
			if strings.EqualFold(s, w) {
				return e.value, nil
			}
		}
	}
	hint := ""
	if e != nil {
		hint = "; " + e.hint
	}
	if strings.HasPrefix(s, "-") {
		return 0, errors.New("is negative" + hint)
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil && durationSyntaxRE().MatchString(s):
		return 0, errors.New("is longer than the longest duration, " + longest + hint)
	case err != nil:
		msg := "is not a duration; use 5s, 20m or 1h30m (units: ms, s, m, h)"
		if e != nil {
			msg += ", or " + e.words[0]
		}
		return 0, errors.New(msg)
	case d == 0 && strings.ContainsAny(s, "123456789"):
		// Below a nanosecond, and positive (no "-"): Go truncated it.
		return time.Nanosecond, nil
	}
	return d, nil
}

// The words of --wait and --kill-after for "without end".
var (
	waitForever = &endless{words: []string{"forever", "inf", "infinity"}, value: supervisor.Forever, hint: "to wait without end, write forever"}
	killNever   = &endless{words: []string{"never"}, value: supervisor.Forever, hint: "to send no SIGKILL, write never"}
)
