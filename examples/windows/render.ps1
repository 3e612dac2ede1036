<#
.SYNOPSIS
  Nightly GPU render through gpuexec, with the outcome decided by the exit status.

.DESCRIPTION
  Runs Blender under gpuexec, so the render queues behind any other program
  holding the shared GPU lock. Exit status 75 means gpuexec gave up waiting
  (the job is DEFERRED, not failed): this script then waits and queues again,
  up to -Attempts times in all. The script's own exit status follows gpuexec's
  (0, 75, 124, ...), so Task Scheduler's "Last Run Result" stays meaningful.

  Works in Windows PowerShell 5.1 and PowerShell 7. Task Scheduler action:
    powershell.exe -NoProfile -ExecutionPolicy Bypass -File "C:\ProgramData\gpuexec\render.ps1"
#>
[CmdletBinding()]
param(
    [string]$Gpuexec = $(if ($env:GPUEXEC_BIN) { $env:GPUEXEC_BIN } else { 'C:\Program Files\gpuexec\gpuexec.exe' }),
    # Shared by every user and task on this machine (see task-scheduler.cmd):
    # the default %TEMP%\gpuexec\gpu.lock is different for each user.
    [string]$Lock = 'C:\ProgramData\gpuexec\gpu.lock',
    [string]$Scene = 'D:\Render Jobs\nightly.blend',
    [ValidateRange(1, 10)][int]$Attempts = 2,
    [ValidateRange(1, 600)][int]$RetryAfterMinutes = 30
)
$ErrorActionPreference = 'Stop'
# PowerShell 7.3+ could otherwise turn a non-zero exit status into an error.
$PSNativeCommandUseErrorActionPreference = $false

$blender = 'C:\Program Files\Blender Foundation\Blender 4.2\blender.exe'
$slug = 'nightly-' + (Get-Date -Format 'yyyy-MM-dd')

# Build the argument list as an array. PowerShell then quotes paths with spaces
# itself, and the '--' is a plain string, so nothing can take it for
# PowerShell's own end-of-parameters marker.
$gpuArgs = @(
    '--lock', $Lock,
    '--owner', 'nightly',
    '--slug', $slug,
    '--wait', '150m',
    '--timeout', '4h',
    '--log', 'C:\ProgramData\gpuexec\render.log',
    '--',
    $blender, '-b', $Scene, '-a'
)

if (-not (Get-Command $Gpuexec -ErrorAction SilentlyContinue)) {
    Write-Error "gpuexec not found at '$Gpuexec' (set GPUEXEC_BIN or -Gpuexec)" -ErrorAction Continue
    exit 127
}

for ($attempt = 1; $attempt -le $Attempts; $attempt++) {
    # gpuexec logs on stderr: INFO lines as it waits, takes the lock and runs
    # the job. Windows PowerShell 5.1 turns every stderr line of a native
    # program into an error record when stderr is redirected (as below, or by
    # whoever captures this script's output), and under
    # $ErrorActionPreference = 'Stop' the first of them would end this script
    # while gpuexec still runs, without its exit status. So gpuexec runs with
    # 'Continue', its stderr merged into the pipeline and each of its lines
    # written back to stderr as plain text; the job's stdout passes through.
    $ErrorActionPreference = 'Continue'
    & $Gpuexec @gpuArgs 2>&1 | ForEach-Object {
        if ($_ -is [System.Management.Automation.ErrorRecord]) {
            [Console]::Error.WriteLine("$_")
        } else {
            $_
        }
    }
    $status = $LASTEXITCODE
    $ErrorActionPreference = 'Stop'

    switch ($status) {
        0 {
            Write-Output "render $slug done"
            exit 0
        }
        75 {
            # Deferred: another program held the GPU for the whole --wait.
            # gpuexec's log names the holder. Queue again later, don't fail.
            if ($attempt -lt $Attempts) {
                Write-Warning "render $slug deferred (GPU busy); queueing again in $RetryAfterMinutes min ($attempt/$Attempts)"
                Start-Sleep -Seconds ($RetryAfterMinutes * 60)
                break   # leaves the switch; the for loop tries again
            }
            Write-Warning "render $slug deferred $Attempts time(s); giving up until the next scheduled run"
            exit 75
        }
        124 {
            Write-Error "render $slug stopped: it ran past --timeout 4h" -ErrorAction Continue
            exit 124
        }
        default {
            $why = switch ($status) {
                125 { 'gpuexec itself failed (bad flag or lock folder not writable)' }
                126 { 'blender.exe is not executable' }
                127 { 'blender.exe not found' }
                default { "render exited with status $status" }
            }
            Write-Error "render ${slug} failed: $why" -ErrorAction Continue
            exit $status
        }
    }
}
