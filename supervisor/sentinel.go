package supervisor

// SentinelArg is the one argument with which Run starts the running
// program again as a job's terminal sentinel (see Config.Sentinel).
const SentinelArg = "--gpuexec-terminal-sentinel"

// IsSentinel reports whether args (os.Args) are those of a terminal
// sentinel: the program and SentinelArg, nothing else. A program that sets
// Config.Sentinel checks it first thing in main and then runs RunSentinel
// instead of itself.
func IsSentinel(args []string) bool { return len(args) == 2 && args[1] == SentinelArg }

// RunSentinel is the terminal sentinel's whole life; it returns the status
// to exit with. On Linux the sentinel sits in the job's process group,
// which has the terminal's foreground, so that it gets what the terminal
// sends that group: each SIGINT (Ctrl+C), SIGQUIT (Ctrl+\) and SIGHUP
// (hangup) that the program catches (signals.Caught: one ignored when
// gpuexec started stays ignored) is reported to the gpuexec that started
// it as one byte, the signal's number, on stdout, after a 0 byte once it
// listens. It ignores the terminal's job-control signals (gpuexec stops
// it when it stops with the job, and the group's SIGCONT continues it) and
// ends when its stdin, a pipe from that gpuexec, is closed. It never reads
// or writes the terminal. Not started by a gpuexec that is its
// parent, with pipes for stdin and stdout (run by hand, or by a script),
// it says so in one line on stderr and returns ExitFailed; outside Linux,
// where no sentinel is started, it always does.
func RunSentinel() int { return runSentinel() }
