@echo off
rem ==========================================================================
rem  Register a nightly GPU render (02:30) with Windows Task Scheduler, run
rem  under gpuexec so it queues behind whoever else is using the GPU.
rem  Run once from an elevated cmd.exe.
rem
rem  WHY --lock IS EXPLICIT: gpuexec's default lock is
rem  %TEMP%\gpuexec\gpu.lock, and %TEMP% is per user
rem  (C:\Users\<name>\AppData\Local\Temp; a system folder for SYSTEM). A task
rem  running as svc-render and a person rendering from their own session
rem  would each get a private lock and use the GPU at the same time. Every
rem  program that shares the GPU must name the same lock, in a folder all of
rem  those users can write, e.g. C:\ProgramData\gpuexec\gpu.lock.
rem  Instead of passing --lock everywhere you can set it machine-wide, since
rem  every flag also reads GPUEXEC_<FLAG>:
rem      setx /M GPUEXEC_LOCK C:\ProgramData\gpuexec\gpu.lock
rem  (new logons and newly started programs see it; restart long-running
rem  services and terminals.)
rem ==========================================================================

rem One-time setup: the shared lock folder. Plain C:\ProgramData lets each
rem user create folders but not write into other users' folders, so grant
rem Modify to Users (S-1-5-32-545, works on any Windows language) or a
rem narrower group. Modify is needed to create, rename aside and delete the
rem lock file.
if not exist "C:\ProgramData\gpuexec" mkdir "C:\ProgramData\gpuexec"
icacls "C:\ProgramData\gpuexec" /grant "*S-1-5-32-545:(OI)(CI)M" >nul

rem The task. Quoting rules for /TR:
rem   * the whole command is ONE argument in double quotes;
rem   * every quote inside it is written \" (schtasks turns \" into ");
rem   * so a path with spaces is \"C:\Program Files\...\exe\";
rem   * /TR may be at most 261 characters after unescaping (this one is 248).
rem     For anything longer, let the task run a script (see the end of this
rem     file).
rem --wait is left at its default, 150m. --slug defaults to the command's base
rem name (blender). /RP * prompts for svc-render's password, so the task also
rem runs when nobody is logged on.
schtasks /Create /F /TN "gpuexec\Nightly render" /SC DAILY /ST 02:30 ^
  /RU "%USERDOMAIN%\svc-render" /RP * ^
  /TR "\"C:\Program Files\gpuexec\gpuexec.exe\" --lock C:\ProgramData\gpuexec\gpu.lock --owner nightly --timeout 4h --log C:\ProgramData\gpuexec\render.log -- \"C:\Program Files\Blender Foundation\Blender 4.2\blender.exe\" -b \"D:\Render Jobs\nightly.blend\" -a"
if errorlevel 1 exit /b %errorlevel%

rem Reading the result: Task Scheduler shows gpuexec's exit status as
rem "Last Run Result" in hex:
rem   0x0  = rendered
rem   0x4B = 75, DEFERRED: the GPU was busy for the whole --wait. Not a
rem          render failure; tomorrow's run tries again. If you need a
rem          same-day retry, run render.ps1 instead (it waits and retries).
rem   0x7C = 124, the render hit --timeout and was stopped
rem   0x7D = 125, gpuexec itself failed (bad flag, lock folder not writable)
rem   0x7E / 0x7F = 126 / 127, blender.exe not executable / not found
rem The task's "Stop the task if it runs longer than" setting (default 3
rem days) ends gpuexec without letting it clean up. Keep it well above
rem --wait + --timeout.
rem
rem Same schedule, running render.ps1. Its command line is short, and the
rem script handles exit status 75 itself:
rem schtasks /Create /F /TN "gpuexec\Nightly render" /SC DAILY /ST 02:30 ^
rem   /RU "%USERDOMAIN%\svc-render" /RP * ^
rem   /TR "powershell.exe -NoProfile -ExecutionPolicy Bypass -File \"C:\ProgramData\gpuexec\render.ps1\""
