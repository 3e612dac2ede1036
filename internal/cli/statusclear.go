package cli

// The status and clear commands: the lock they act on, read once, and what
// they print (the words: status.go; the --json object: statusjson.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/gpuexec/gpuexec/internal/escape"
	"github.com/gpuexec/gpuexec/lock"
	"github.com/gpuexec/gpuexec/signals"
)

// lockCommand is the lock that status and clear act on, checked.
func lockCommand(c *cli.Context, withDevices bool) (lock.Options, lock.Backend, error) {
	if err := noArgs(c); err != nil {
		return lock.Options{}, nil, err
	}
	if err := noZeroIntervals(c, "stale"); err != nil {
		return lock.Options{}, nil, err
	}
	// With devices a --gpus UUID is mapped with nvidia-smi, which a
	// signal that ends gpuexec stops.
	ctx, ended := context.Background(), func() os.Signal { return nil }
	if withDevices {
		ctx, ended = signals.Ending(ctx)
	}
	o, b, err := lockOptions(ctx, c, withDevices)
	if sig := ended(); sig != nil {
		return o, nil, readingInterrupted(sig)
	}
	if err != nil {
		return o, nil, err
	}
	if err := b.Check(o); err != nil {
		return o, nil, optionFailed(err)
	}
	return o, b, nil
}

// readingInterrupted is how status ends when sig came while nvidia-smi
// ran: stopped and waited for, with 128+N.
func readingInterrupted(sig os.Signal) error {
	return cli.Exit("interrupted by "+signals.Name(sig)+" while reading the GPUs", signals.ExitStatus(sig))
}

func statusCmd(c *cli.Context, stdout io.Writer) error {
	o, b, err := lockCommand(c, true)
	if err != nil {
		return err
	}
	return showStatus(c, stdout, o, b)
}

// showStatus prints status of the lock o of backend b from one reading
// of it (b.Inspect): the text, the cards and the attribution of their
// processes, and --json's object and --check's status are all made from
// that report.
func showStatus(c *cli.Context, stdout io.Writer, o lock.Options, b lock.Backend) error {
	r, err := b.Inspect(o)
	if err != nil {
		return unreadable(o.Path, err)
	}
	// A signal that ends gpuexec while nvidia-smi runs stops it first.
	ctx, ended := signals.Ending(context.Background())
	cards, gerr := statusCards(ctx, c, b, r.Locks)
	if sig := ended(); sig != nil {
		return readingInterrupted(sig)
	}
	var ec cli.ExitCoder
	if errors.As(gerr, &ec) {
		return gerr
	}
	reserve, err := sizeOf(c, "reserve")
	if err != nil {
		return err
	}
	rooms, lines := shareRooms(r, cards, reserve)
	if c.Bool("json") {
		if err := printJSON(stdout, statusObject(r, rooms, cards, gerr)); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(stdout, describeReport(r))
		printCards(stdout, cards, gerr)
		for _, l := range lines {
			fmt.Fprintln(stdout, l)
		}
	}
	if c.Bool("check") {
		if code := checkStatus(r); code != 0 {
			return cli.Exit("", code)
		}
	}
	return nil
}

// printJSON prints v as one JSON line, with what other processes wrote
// into a lock (the Node tool takes any owner) escaped so that it cannot act
// on a terminal (see escape.JSON).
func printJSON(stdout io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return failed("%v", err)
	}
	fmt.Fprintln(stdout, string(escape.JSON(b)))
	return nil
}

func clearCmd(c *cli.Context, stdout, stderr io.Writer) error {
	o, b, err := lockCommand(c, false)
	if err != nil {
		return err
	}
	o.Logger = hclog.New(&hclog.LoggerOptions{Name: "gpuexec", Output: stderr, Level: hclog.Info}).Named("lock")
	st, err := b.Clear(o, c.Bool("force"))
	switch {
	case errors.Is(err, lock.ErrHeld) && c.Bool("force"):
		// Only a job whose record was removed while it runs is left
		// after a forced clear: no file of a live job is removed.
		return cli.Exit(fmt.Sprintf("not cleared: %s; the lock is free once that job ends", lockLine(st)), 1)
	case errors.Is(err, lock.ErrHeld):
		return cli.Exit(notCleared(st), 1)
	case errors.Is(err, lock.ErrNoFolder), errors.Is(err, syscall.ENOTDIR):
		// A mistyped --lock is not a free lock, as for status.
		return unreadable(o.Path, err)
	case err != nil:
		return failed("%v", err)
	case st.State == lock.StateFree:
		fmt.Fprintln(stdout, "free: nothing to clear")
	case st.State == lock.StateHeld:
		fmt.Fprintln(stdout, "cleared (forced): "+lockText(st)+"\n"+afterForcedClear(st))
	default:
		fmt.Fprintln(stdout, "cleared: "+lockLine(st))
	}
	return nil
}
