package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpuexec/gpuexec/signals"
)

// Shell completion: gpuexec completion bash|zsh|fish|powershell prints a
// script. Bash, zsh and PowerShell ask gpuexec itself (urfave/cli's
// --generate-bash-completion) for the subcommands and flags that fit; fish
// gets urfave/cli's static script. None of them ever runs gpuexec with
// the words after "--": those are the job's, and gpuexec would run it.

func completionCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:            "completion",
		Usage:           "print a shell completion script: bash, zsh, fish or powershell",
		ArgsUsage:       "bash|zsh|fish|powershell",
		HideHelpCommand: true,
		BashComplete: func(c *cli.Context) {
			if c.Args().Len() == 0 {
				io.WriteString(c.App.Writer, "bash\nzsh\nfish\npowershell\n")
			}
		},
		Description: "bash:       source <(gpuexec completion bash)         (or save it in /etc/bash_completion.d/gpuexec)\n" +
			"zsh:        source <(gpuexec completion zsh)          (or save it as _gpuexec in a folder of $fpath)\n" +
			"fish:       gpuexec completion fish | source          (or save it in ~/.config/fish/completions/gpuexec.fish)\n" +
			"PowerShell: gpuexec completion powershell | Out-String | Invoke-Expression   (or add it to $PROFILE)",
		Action: func(c *cli.Context) error {
			if c.Args().Len() != 1 {
				return failed("completion takes one shell: bash, zsh, fish or powershell")
			}
			var script string
			switch shell := c.Args().First(); strings.ToLower(shell) {
			case "bash":
				script = bashCompletion
			case "zsh":
				script = zshCompletion
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return failed("completion fish: %v", err)
				}
				// urfave/cli keeps the backquotes that mark
				// placeholders in the descriptions.
				script = strings.ReplaceAll(s, "`", "")
			case "powershell", "pwsh":
				script = powershellCompletion
			default:
				return failed("completion: %q is not a shell it knows: bash, zsh, fish or powershell", shell)
			}
			_, err := io.WriteString(stdout, script)
			return err
		},
		OnUsageError: usageError,
	}
}

// withCompletion has app and its subcommands complete as completeFlags
// says, without offering a help subcommand.
func withCompletion(app *cli.App) *cli.App {
	app.BashComplete = completeFlags(nil)
	for _, c := range app.Commands {
		c.HideHelpCommand = true
		if c.BashComplete == nil {
			c.BashComplete = completeFlags(c)
		}
	}
	return app
}

// completeFlags is the BashComplete of gpuexec and its subcommands: after
// a flag that takes one of a few values (--on-lost), those values (see
// flagValues); after another flag that takes a value (--lock, --wait),
// nothing, so that the shell completes a file name; otherwise urfave/cli's
// default (the subcommands, or the flags that begin with what was typed).
func completeFlags(cmd *cli.Command) cli.BashCompleteFunc {
	plain := cli.DefaultCompleteWithFlags(cmd)
	return func(c *cli.Context) {
		// As urfave/cli's: the word before --generate-bash-completion.
		if n := len(os.Args); n > 2 {
			last := os.Args[n-2]
			if strings.HasPrefix(last, "-") && !strings.Contains(last, "=") {
				name := strings.TrimLeft(last, "-")
				if f := flagNamed(c, name); f != nil {
					if v, ok := f.(cli.DocGenerationFlag); ok && v.TakesValue() {
						for _, value := range flagValues(name) {
							fmt.Fprintln(c.App.Writer, value)
						}
						return
					}
				}
			}
		}
		plain(c)
	}
}

// flagValues are the values of the flag name that takes one of a few; nil
// for another flag.
func flagValues(name string) []string {
	switch name {
	case "on-lost":
		return []string{"stop", "continue"}
	case "log-level":
		return []string{"trace", "debug", "info", "warn", "error", "off"}
	case "log-format":
		return []string{"text", "json"}
	case "signal":
		// Those this OS takes that end a job (signals.Parse).
		var names []string
		for _, n := range []string{"TERM", "INT", "HUP", "QUIT", "KILL", "USR1", "USR2"} {
			if sig, err := signals.Parse(n); err == nil && signals.Of(sig) == signals.End {
				names = append(names, n)
			}
		}
		return names
	}
	return nil
}

const bashCompletion = `# bash completion for gpuexec.
# Load it with: source <(gpuexec completion bash)
_gpuexec_complete() {
  local cur="${COMP_WORDS[COMP_CWORD]}" i
  COMPREPLY=()
  # After "--" the words are the job's: a command, then its arguments.
  # Never run gpuexec with them: it would run the job.
  for ((i = 1; i < COMP_CWORD; i++)); do
    if [[ "${COMP_WORDS[i]}" == "--" ]]; then
      if ((i == COMP_CWORD - 1)); then
        COMPREPLY=($(compgen -c -- "$cur"))
      fi
      return 0
    fi
  done
  local -a ask=("${COMP_WORDS[@]:0:COMP_CWORD}")
  case "$cur" in
  --) ask+=(-) ;;
  -*) ask+=("$cur") ;;
  esac
  local opts
  opts=$("${ask[@]}" --generate-bash-completion 2>/dev/null)
  COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  return 0
}
complete -o bashdefault -o default -F _gpuexec_complete gpuexec
`

const zshCompletion = `#compdef gpuexec
# zsh completion for gpuexec.
# Load it with: source <(gpuexec completion zsh)
_gpuexec() {
  local cur=${words[CURRENT]} i
  # After "--" the words are the job's: a command, then its arguments.
  # Never run gpuexec with them: it would run the job.
  for ((i = 2; i < CURRENT; i++)); do
    if [[ ${words[i]} == -- ]]; then
      if ((i == CURRENT - 1)); then
        _command_names -e
      else
        _files
      fi
      return
    fi
  done
  local -a ask opts
  ask=("${(@)words[1,CURRENT-1]}")
  case $cur in
  --) ask+=(-) ;;
  -*) ask+=("$cur") ;;
  esac
  opts=("${(@f)$("${(@)ask}" --generate-bash-completion 2>/dev/null)}")
  if [[ -n ${opts[1]} ]]; then
    _describe 'gpuexec' opts
  else
    _files
  fi
}
if [[ ${zsh_eval_context[-1]} == loadautofunc ]]; then
  _gpuexec "$@"
else
  compdef _gpuexec gpuexec
fi
`

const powershellCompletion = `# PowerShell completion for gpuexec.
# Load it with: gpuexec completion powershell | Out-String | Invoke-Expression
Register-ArgumentCompleter -Native -CommandName gpuexec, gpuexec.exe -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)
    $words = @($commandAst.CommandElements |
        Where-Object { $_.Extent.EndOffset -lt $cursorPosition } |
        ForEach-Object { $_.Extent.Text })
    # After '--' the words are the job's: never run gpuexec with them (it
    # would run the job); PowerShell then completes file names.
    if ($words -contains '--' -or $words -contains "'--'" -or $words -contains '"--"') { return }
    $ask = @()
    if ($words.Count -gt 1) { $ask = $words[1..($words.Count - 1)] }
    if ($wordToComplete -eq '--') { $ask += '-' } elseif ($wordToComplete -like '-*') { $ask += $wordToComplete }
    & $words[0] @ask --generate-bash-completion 2>$null |
        Where-Object { $_ -like "$wordToComplete*" } |
        ForEach-Object {
            $name = ($_ -split ':', 2)[0]
            [System.Management.Automation.CompletionResult]::new($name, $name, 'ParameterValue', $name)
        }
}
`
