package cli

import (
	"fmt"
	"os"
	"reflect"
	"slices"

	"github.com/urfave/cli/v2"
)

// Flags given before a subcommand (gpuexec --lock PATH status), as git and
// docker users write them, are the subcommand's too. The app's own flags
// read the GPUEXEC_* variables; a subcommand's flags do not, and take what
// was not given after the subcommand from the app's: given after the
// subcommand, then before it, then the variable, then the default.

// inheritNote says so in each subcommand's help.
const inheritNote = "Flags may also come before the subcommand (gpuexec --lock PATH status); one given after it wins.\n" +
	"Each flag also reads GPUEXEC_<FLAG> (--kill-after: GPUEXEC_KILL_AFTER)."

// subcommandFlags are flags for a subcommand: without their variables,
// which the app's flags read (see inheritFlags).
func subcommandFlags(flags ...cli.Flag) []cli.Flag {
	for _, f := range flags {
		if v := reflect.ValueOf(f); v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
			if ev := v.Elem().FieldByName("EnvVars"); ev.IsValid() && ev.CanSet() {
				ev.Set(reflect.Zero(ev.Type()))
			}
		}
	}
	return flags
}

// ownMeaning are, by subcommand, its flags that share a name with a job's
// but mean something else there (report's --owner filters, a job's names
// it): never taken from the app's (a GPUEXEC_OWNER set for jobs must not
// narrow a report).
var ownMeaning = map[string][]string{"report": {"owner"}}

// lockChoosing are the flags that say which lock a command acts on.
var lockChoosing = []string{"lock", "gpus", "gpu-count", "stale"}

// inheritFlags is a subcommand's Before: each of its flags not given after
// the subcommand takes the app's value (given before it, from its
// variable, or the default). A flag that chooses the lock (lockChoosing)
// given before a subcommand that does not take it (clear has no --gpus) is
// refused, so that it never acts on another lock than the one named;
// other job flags before status or clear (an alias gx='gpuexec --owner
// me') change nothing there and are let be.
func inheritFlags(c *cli.Context) error {
	lineage := c.Lineage()
	if len(lineage) < 2 {
		return nil
	}
	parent := lineage[1]
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		// Only values given (before the subcommand, or by a variable):
		// the defaults are the same, and IsSet stays true only for
		// what was given.
		if isHelpFlag(name) || c.IsSet(name) || slices.Contains(ownMeaning[c.Command.Name], name) || flagNamed(parent, name) == nil || !parent.IsSet(name) {
			continue
		}
		if err := c.Set(name, fmt.Sprint(parent.Value(name))); err != nil {
			return failed("--%s: %v", name, err)
		}
	}
	for _, f := range flagsOf(parent) {
		name := f.Names()[0]
		if !slices.Contains(lockChoosing, name) || flagNamed(c, name) != nil || !onCommandLine(parent, f) {
			continue
		}
		return failed("%s takes no --%s (given before it): it acts on the one lock --lock names (see gpuexec %s --help)", c.Command.Name, name, c.Command.Name)
	}
	return nil
}

// onCommandLine reports whether the flag f of the context c was given on
// the command line, not only by its variable. When both may have set it,
// it says no: a variable meant for jobs must not make a subcommand fail.
func onCommandLine(c *cli.Context, f cli.Flag) bool {
	name := f.Names()[0]
	if !c.IsSet(name) {
		return false
	}
	if ef, ok := f.(interface{ GetEnvVars() []string }); ok {
		for _, v := range ef.GetEnvVars() {
			if _, set := os.LookupEnv(v); set {
				return false
			}
		}
	}
	return true
}

// flagsOf are the flags of c's command (the app's for the app).
func flagsOf(c *cli.Context) []cli.Flag {
	if c.Command != nil && len(c.Command.Flags) > 0 {
		return c.Command.Flags
	}
	if c.App != nil {
		return c.App.Flags
	}
	return nil
}

// isHelpFlag: --help, --version and urfave's completion flag are never
// inherited nor refused.
func isHelpFlag(name string) bool {
	return slices.Contains([]string{"help", "h", "version", "v", "generate-bash-completion"}, name)
}
