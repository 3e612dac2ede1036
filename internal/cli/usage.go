package cli

import (
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/gpuexec/gpuexec/internal/escape"
	"github.com/urfave/cli/v2"
)

// The flag parsing errors that usageMessage rewrites: those of Go's flag
// package (one dash, "parse error" with no reason) and those of urfave/cli
// for a GPUEXEC_* variable. Compiled when first needed, not at every start.
var usageREs = sync.OnceValue(func() usagePatterns {
	return usagePatterns{
		badFlagValue: regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([^\s:]+): (.*)$`),
		badEnvValue:  regexp.MustCompile(`^could not parse ("(?:[^"\\]|\\.)*") as \S+ value from environment variable "([^"]+)" for flag ([^\s:]+): (.*)$`),
		// A cli.GenericFlag's (durationFlag).
		badEnvGeneric: regexp.MustCompile(`^could not parse ("(?:[^"\\]|\\.)*") from environment variable "([^"]+)" as value for flag ([^\s:]+): (.*)$`),
		needsValue:    regexp.MustCompile(`^flag needs an argument: -+(\S+)$`),
		unknownFlag:   regexp.MustCompile(`^flag provided but not defined: -+(\S+)$`),
	}
})

type usagePatterns struct{ badFlagValue, badEnvValue, badEnvGeneric, needsValue, unknownFlag *regexp.Regexp }

// usageMessage is the one line gpuexec prints for a flag parsing error
// err of the command c: the flag or variable, what was given and what is
// expected ("--wait: "5" is not a duration; use 5s, 20m or 1h30m").
// Errors it does not know keep their text.
func usageMessage(c *cli.Context, err error) string {
	msg := err.Error()
	help := helpLine(c)
	re := usageREs()
	if m := re.badFlagValue.FindStringSubmatch(msg); m != nil {
		return "--" + m[2] + ": " + badValue(flagNamed(c, m[2]), m[1], m[3])
	}
	if m := re.badEnvValue.FindStringSubmatch(msg); m != nil {
		return m[2] + ": " + badValue(flagNamed(c, m[3]), m[1], m[4])
	}
	if m := re.badEnvGeneric.FindStringSubmatch(msg); m != nil {
		return m[2] + ": " + badValue(flagNamed(c, m[3]), m[1], m[4])
	}
	if m := re.needsValue.FindStringSubmatch(msg); m != nil {
		if isDurationFlag(flagNamed(c, m[1])) {
			return "--" + m[1] + " needs a duration, such as 5s, 20m or 1h30m"
		}
		return "--" + m[1] + " needs a value (see " + help + ")"
	}
	if m := re.unknownFlag.FindStringSubmatch(msg); m != nil {
		return "unknown flag --" + m[1] + " (see " + help + ")"
	}
	return msg + " (see " + help + ")"
}

// helpLine is the command line that shows the help of c's command:
// gpuexec --help, or gpuexec status --help for a subcommand.
func helpLine(c *cli.Context) string {
	if c != nil && c.Command != nil && c.Command.Name != "" && c.Command.Name != c.App.Name {
		return "gpuexec " + c.Command.Name + " --help"
	}
	return "gpuexec --help"
}

// badValue says why value, as the error quoted it, does not fit the flag f
// (nil when unknown); why is the parser's reason, which a durationFlag's
// says in words that follow the value (see parseDuration).
func badValue(f cli.Flag, quoted, why string) string {
	value, err := strconv.Unquote(quoted)
	if err != nil {
		value = quoted
	}
	q := quote(value)
	if isDurationFlag(f) {
		return q + " " + why
	}
	switch f.(type) {
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
		return q + " is not a whole number"
	case *cli.BoolFlag:
		return q + " is not true or false"
	}
	return q + " is not a valid value"
}

// quote is value quoted as Go does, so that control characters in it
// cannot act on a terminal (see escape.Quote), and cut short.
func quote(value string) string {
	const max = 64
	if len(value) > max {
		value = strings.ToValidUTF8(value[:max], "") + "..."
	}
	return escape.Quote(value)
}

// flagNamed is the flag of c's command (or, for the app, its own) named
// name; nil if none.
func flagNamed(c *cli.Context, name string) cli.Flag {
	if c == nil {
		return nil
	}
	for _, f := range flagsOf(c) {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}
