package testsupport

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Windows and Wine give a freed pid out again (Wine once 256 are free,
// oldest first): DeadPID's pid must stay unused however many processes
// start after it, or a lock record naming it turns live in the middle of a
// test (TestScripts/status_gpus did so once under Wine).
func TestDeadPIDIsNotGivenOutAgain(t *testing.T) {
	dead := DeadPID(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// 8 at a time, 600 in all: more than Wine keeps free before it
	// reuses one.
	const workers, each = 8, 75
	errs := make(chan error, workers)
	for range workers {
		go func() {
			for range each {
				cmd := exec.Command(self)
				cmd.Env = Env(exitEnv + "=1")
				if err := cmd.Run(); err != nil {
					errs <- err
					return
				}
				if cmd.Process.Pid == dead {
					errs <- fmt.Errorf("a process started after DeadPID got its pid %d", dead)
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if !Gone(dead) || !unused(dead) {
		t.Fatalf("DeadPID's pid %d is not gone", dead)
	}
}
