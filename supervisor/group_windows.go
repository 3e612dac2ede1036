//go:build windows

package supervisor

import (
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

// configure starts the child in a new console process group, so that a
// CTRL_BREAK_EVENT can be sent to it and its descendants alone.
func configure(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: windows.CREATE_NEW_PROCESS_GROUP}
}

// group is the child's Job Object, created with KILL_ON_JOB_CLOSE: when
// gpuexec ends, however it ends, Windows closes the handle and kills every
// process in the job.
type group struct {
	pid int
	job windows.Handle
}

func newGroup(cmd *exec.Cmd) (*group, error) {
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
	ph, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(cmd.Process.Pid))
	if err != nil {
		windows.CloseHandle(job)
		return nil, fmt.Errorf("OpenProcess: %w", err)
	}
	defer windows.CloseHandle(ph)
	if err := windows.AssignProcessToJobObject(job, ph); err != nil {
		windows.CloseHandle(job)
		return nil, fmt.Errorf("AssignProcessToJobObject: %w", err)
	}
	return &group{pid: cmd.Process.Pid, job: job}, nil
}

func (g *group) id() int { return g.pid }

// signal sends CTRL_BREAK_EVENT to the child's console process group (the
// only console event that can target a group).
func (g *group) signal(os.Signal) error {
	return windows.GenerateConsoleCtrlEvent(windows.CTRL_BREAK_EVENT, uint32(g.pid))
}

// kill terminates every process in the job.
func (g *group) kill() error { return windows.TerminateJobObject(g.job, 1) }

// alive reports whether the job still has a running process.
func (g *group) alive() bool {
	var info jobAccounting
	err := windows.QueryInformationJobObject(g.job, windows.JobObjectBasicAccountingInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info)), nil)
	return err == nil && info.ActiveProcesses > 0
}

func (g *group) reap() {}

func (g *group) close() { windows.CloseHandle(g.job) }

// exitStatus is the child's exit code.
func exitStatus(st *os.ProcessState) int {
	if st == nil {
		return ExitFailed
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
