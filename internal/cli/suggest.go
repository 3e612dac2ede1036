package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
)

// didYouMean is the hint for a command that was not found when its name
// is close to one of gpuexec's subcommands ("gpuexec stauts" ran a command
// named stauts): `did you mean "gpuexec status"?`; for help and version
// (gpuexec --lock L help ran a command named help), gpuexec's own; ""
// otherwise. A path, or the name of a file that exists, gets no hint.
func didYouMean(commands []*cli.Command) func(string) string {
	return func(name string) string {
		if name == "" || strings.ContainsRune(name, '/') || strings.ContainsRune(name, filepath.Separator) {
			return ""
		}
		if _, err := os.Lstat(name); err == nil {
			return ""
		}
		// gpuexec help and gpuexec version are answered (see
		// spelledOut); after a flag they are a job's command.
		if name == "help" || name == "version" {
			return fmt.Sprintf("gpuexec's own %s is %q", name, "gpuexec --"+name)
		}
		if sub := closeSubcommand(commands, name); sub != "" {
			return fmt.Sprintf("did you mean %q?", "gpuexec "+sub)
		}
		return ""
	}
}

// closeSubcommand is the subcommand of commands whose name name is a typo
// of (see closeEnough); "" when none is close.
func closeSubcommand(commands []*cli.Command, name string) string {
	best, bestD := "", -1
	for _, c := range commands {
		for _, sub := range c.Names() {
			d := editDistance(strings.ToLower(name), sub)
			if d <= closeEnough(sub) && (bestD < 0 || d < bestD) {
				best, bestD = sub, d
			}
		}
	}
	return best
}

// closeEnough is the most edits a typo of the subcommand sub may be: 2,
// but 1 for a short name (run), where 2 would match unrelated commands.
func closeEnough(sub string) int {
	if len(sub) < 5 {
		return 1
	}
	return 2
}

// editDistance is the optimal string alignment distance between a and b:
// the fewest insertions, deletions, substitutions and swaps of two
// adjacent letters that turn one into the other (stauts → status is 1).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > 64 || len(rb) > 64 {
		return 64 // far from every subcommand; bounds the work
	}
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
