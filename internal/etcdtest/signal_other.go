//go:build !unix

package etcdtest

import (
	"errors"
	"os"
)

var errNoPause = errors.New("etcdtest: pausing a member needs SIGSTOP (Unix)")

func pause(*os.Process) error  { return errNoPause }
func resume(*os.Process) error { return errNoPause }
