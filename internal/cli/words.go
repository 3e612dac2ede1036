package cli

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// The words of a command line that are not flags, and what each command
// takes of them, so that none is ever ignored:
//
//	gpuexec, gpuexec run  a command: what follows "--", or without a "--" the
//	                      words after the flags (gpuexec python train.py);
//	                      a word before a "--" is refused (strayWords)
//	status, clear, top    none (noArgs)
//	completion            one shell (its Action)
//	--help                none; before a subcommand, its name (gpuexec --help status)
//	--version             none
//	help, version         first on the line: as --help and --version (spelledOut)
//
// Only a job takes "--" (checkWords). A word that is none of these is one
// line and status 125, never a run; a typo of a subcommand gets the "did
// you mean" hint.

// helpFlag and versionFlag are urfave/cli's, as it defines them, but
// answered by checkWords: urfave/cli prints the help or the version
// whatever words come with them (help.go's init takes its help flag away,
// withWords' HideVersion its version flag).
func helpFlag() cli.Flag {
	return &cli.BoolFlag{Name: "help", Aliases: []string{"h"}, Usage: "show help", DisableDefaultText: true}
}

func versionFlag() cli.Flag {
	return &cli.BoolFlag{Name: "version", Aliases: []string{"v"}, Usage: "print the version", DisableDefaultText: true}
}

// withWords gives app the help and version flags and its commands the
// help flag, and has each check its words (checkWords) before its own
// Before; child is what followed "--" (nil without one), jobs the
// subcommands that run a job and so take it.
func withWords(app *cli.App, child []string, jobs ...string) *cli.App {
	app.HideVersion = true
	app.Flags = append(app.Flags, helpFlag(), versionFlag())
	app.Before = checkingWords(child, true, true, app.Before)
	for _, c := range app.Commands {
		c.Flags = append(c.Flags, helpFlag())
		c.Before = checkingWords(child, false, slices.Contains(jobs, c.Name), c.Before)
	}
	return app
}

// checkingWords is checkWords, then next (if any).
func checkingWords(child []string, root, job bool, next cli.BeforeFunc) cli.BeforeFunc {
	return func(c *cli.Context) error {
		if err := checkWords(c, child, root, job); err != nil {
			return err
		}
		if next == nil {
			return nil
		}
		return next(c)
	}
}

// answered ends a command whose --help or --version was answered: status
// 0, nothing more printed.
var answered = cli.Exit("", 0)

// checkWords answers --help and --version given to c's command (root: the
// app itself), or refuses the words they do not take, and refuses a "--"
// given to a command that runs no job (job false). Before a subcommand,
// --help is that subcommand's (gpuexec --help status); --version is the
// app's alone and takes no subcommand. --help wins over --version.
func checkWords(c *cli.Context, child []string, root, job bool) error {
	words := c.Args()
	help := c.Bool("help") || !root && c.Lineage()[1].Bool("help")
	version := !help && root && c.Bool("version")
	if !help && !version {
		if child != nil && !job {
			return failed("%s takes no \"--\" and command: it runs no job", c.Command.Name)
		}
		return nil
	}
	if root && help && c.App.Command(words.First()) != nil {
		return nil // gpuexec --help status: status answers
	}
	asked := "--help"
	if version {
		asked = "--version"
	}
	if !root {
		asked = c.Command.Name + " " + asked
	}
	if child != nil {
		return failed("%s takes no \"--\" and command: it runs no job", asked)
	}
	if w := words.First(); words.Present() {
		if root && help {
			return notASubcommand(c, w)
		}
		return failed("%s takes no arguments, got %s", asked, quote(w))
	}
	switch {
	case version:
		cli.ShowVersion(c)
	case root:
		cli.ShowAppHelp(c)
	default:
		cli.ShowSubcommandHelp(c)
	}
	return answered
}

// notASubcommand refuses gpuexec --help WORD for a word that names no
// subcommand, with the "did you mean" hint for a typo of one.
func notASubcommand(c *cli.Context, w string) error {
	commands := c.App.VisibleCommands()
	if sub := closeSubcommand(commands, w); sub != "" {
		return failed("--help: %s is not a subcommand; did you mean %q?", quote(w), "gpuexec --help "+sub)
	}
	names := make([]string, len(commands))
	for i, s := range commands {
		names[i] = s.Name
	}
	return failed("--help: %s is not a subcommand (%s)", quote(w), strings.Join(names, ", "))
}

// spelledOut is args (gpuexec's, before any "--") with a first word help
// or version read as --help or --version, as git and go users type them:
// gpuexec help status is gpuexec --help status. A command named help runs
// with gpuexec -- help.
func spelledOut(args []string) []string {
	if len(args) < 2 {
		return args
	}
	var flag string
	switch args[1] {
	case "help":
		flag = "--help"
	case "version":
		flag = "--version"
	default:
		return args
	}
	return append([]string{args[0], flag}, args[2:]...)
}

// strayWords refuses the words a job's command line has before a "--"
// that gave its command: the parser took them for no flag, flag value or
// subcommand (gpuexec --timeout 1h 30m --wait 0 -- job: "30m"), and read
// no flag after them.
func strayWords(c *cli.Context) error {
	if !c.Args().Present() {
		return nil
	}
	w := c.Args().First()
	if sub := closeSubcommand(c.App.VisibleCommands(), w); sub != "" {
		return failed("%s before \"--\" is not a flag, a flag's value or a subcommand; did you mean %q?", quote(w), "gpuexec "+sub)
	}
	return failed("%s before \"--\" is not a flag, a flag's value or a subcommand: flags go before \"--\", the command after it (see %s)", quote(w), helpLine(c))
}
