//go:build windows

package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// terminate is the graceful stop sent at --timeout and when the lock is lost:
// it becomes CTRL_BREAK_EVENT to the child's console process group.
var terminate os.Signal = syscall.SIGTERM

// killedStatus is the exit code TerminateJobObject gives the job's processes
// when the grace period is over: 128+9, what a shell reports for a process
// killed by SIGKILL on Unix.
const killedStatus = 128 + 9

// statusControlCExit is STATUS_CONTROL_C_EXIT, the exit code of a process
// that Ctrl+C or Ctrl+Break ended (the default console control handler's).
const statusControlCExit = 0xC000013A

// ntResumeProcess resumes every thread of a process, given a handle to it.
// It is exported by ntdll.dll on every Windows since XP (and by Wine's).
var ntResumeProcess = windows.NewLazySystemDLL("ntdll.dll").NewProc("NtResumeProcess")

// configure starts the child suspended (it runs nothing until newGroup has
// put it in the job and resumed it) and in a new console process group, so
// that a CTRL_BREAK_EVENT can be sent to it and its descendants alone.
func configure(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{
		CreationFlags: windows.CREATE_NEW_PROCESS_GROUP | windows.CREATE_SUSPENDED,
	}
}

// group is the child's Job Object, created with KILL_ON_JOB_CLOSE: when
// gpuexec ends, however it ends (taskkill /F included), Windows closes the
// handle and kills every process in the job.
type group struct {
	pid int
	job windows.Handle
}

// newGroup puts the child, still suspended, in a new Job Object and resumes
// it. Every process it starts is then born in the job; no instruction of
// the child runs outside it.
//
// The child is resumed with NtResumeProcess through the process handle
// os.Process holds (Process.WithHandle), the handle CreateProcess returned:
// no pid is looked up again, so no recycled pid can be confused with the
// child. The alternative, finding the primary thread with a
// CreateToolhelp32Snapshot of every thread on the machine and ResumeThread,
// needs a pid lookup and a system-wide walk; exec.Cmd closes the thread
// handle CreateProcess returned.
//
// On error the child is left suspended: the caller kills it. If gpuexec
// itself is killed in the microseconds between CreateProcess and the
// assignment, the child stays suspended for good, outside any job: it never
// runs and holds no GPU memory, but it is not cleaned up.
func newGroup(cmd *exec.Cmd, _ bool, _ map[int]bool) (*group, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return nil, fmt.Errorf("CreateJobObject: %w", err)
	}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{
		BasicLimitInformation: windows.JOBOBJECT_BASIC_LIMIT_INFORMATION{
			LimitFlags: windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
		},
	}
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		windows.CloseHandle(job)
		return nil, fmt.Errorf("SetInformationJobObject: %w", err)
	}
	var opErr error
	err = cmd.Process.WithHandle(func(h uintptr) {
		if err := windows.AssignProcessToJobObject(job, windows.Handle(h)); err != nil {
			opErr = fmt.Errorf("AssignProcessToJobObject: %w", err)
			return
		}
		opErr = resume(h)
	})
	if err = errors.Join(err, opErr); err != nil {
		// Closing the job kills the child if it was assigned.
		windows.CloseHandle(job)
		return nil, err
	}
	return &group{pid: cmd.Process.Pid, job: job}, nil
}

// resume resumes the suspended process whose handle is h.
func resume(h uintptr) error {
	if err := ntResumeProcess.Find(); err != nil {
		return err
	}
	st, _, _ := ntResumeProcess.Call(h)
	if st := windows.NTStatus(uint32(st)); st != windows.STATUS_SUCCESS {
		return fmt.Errorf("NtResumeProcess: %w", st)
	}
	return nil
}

// id is what the lock records as childPgid: the child's pid, which is also
// the id of its console process group.
func (g *group) id() int { return g.pid }

// signal sends CTRL_BREAK_EVENT to the child's console process group (the
// only console event that can target a group: a new group ignores
// CTRL_C_EVENT). It fails where gpuexec has no console, or another one than
// the child's; the job is then killed after the grace period.
func (g *group) signal(os.Signal) error {
	return windows.GenerateConsoleCtrlEvent(windows.CTRL_BREAK_EVENT, uint32(g.pid))
}

// kill terminates every process in the job, with exit code 137.
func (g *group) kill() error { return windows.TerminateJobObject(g.job, killedStatus) }

// alive reports whether the job still has a running process.
func (g *group) alive() bool {
	var info jobAccounting
	err := windows.QueryInformationJobObject(g.job, windows.JobObjectBasicAccountingInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info)), nil)
	return err == nil && info.ActiveProcesses > 0
}

func (g *group) reap() {}

// childrenBefore notes nothing: the Job Object holds the job alone.
func childrenBefore(bool) map[int]bool { return nil }

// resume does nothing: Windows has no stopped jobs to continue.
func (g *group) resume() {}

// stopSelf is never called on Windows, which has no stop signals.
func stopSelf() {}

// stopStrays does nothing: no process of the job can leave its Job Object.
func (g *group) stopStrays(os.Signal) {}

// describeLeft names what is left of the job, for the log.
func (g *group) describeLeft() string { return fmt.Sprintf("Job Object of pid %d", g.pid) }

// close closes the job's handle, which kills what is left in it.
func (g *group) close() { windows.CloseHandle(g.job) }

// exitStatus maps the child's exit code to gpuexec's status: the code
// itself, except that a child ended by Ctrl+C or Ctrl+Break
// (STATUS_CONTROL_C_EXIT) gives 130, as a process killed by SIGINT does on
// Unix.
func exitStatus(st *os.ProcessState) int {
	if st == nil {
		return ExitFailed
	}
	if uint32(st.ExitCode()) == statusControlCExit {
		return 128 + int(syscall.SIGINT)
	}
	return st.ExitCode()
}

// jobAccounting is JOBOBJECT_BASIC_ACCOUNTING_INFORMATION, which x/sys does
// not define.
type jobAccounting struct {
	TotalUserTime             int64
	TotalKernelTime           int64
	ThisPeriodTotalUserTime   int64
	ThisPeriodTotalKernelTime int64
	TotalPageFaultCount       uint32
	TotalProcesses            uint32
	ActiveProcesses           uint32
	TotalTerminatedProcesses  uint32
}
