#!/usr/bin/env python3
"""Run one GPU job under gpuexec from Python and act on its exit status.

    python3 render_with_gpuexec.py ep12 -- python3 render.py --episode ep12

Standard library only (Python 3.8+). Environment:
    GPUEXEC_BIN    gpuexec executable (default "gpuexec", looked up in PATH)
    RENDER_OWNER   lock owner shown to other waiters (default "channels")
    GPUEXEC_LOCK, GPUEXEC_WAIT, GPUEXEC_LOG, ...  read by gpuexec itself for
                   the flags not passed here (set GPUEXEC_LOCK to the lock
                   every GPU user on the machine shares; GPUEXEC_WAIT=0 tries
                   once and defers at once while the GPU is busy)

run_on_gpu() returns "done", "deferred", "timeout" or "failed". "deferred"
(gpuexec exit 75) means the GPU stayed busy for the whole --wait: the job did
not run and should be queued again later. It is not a failure.

The __main__ demo exits with gpuexec's status, as a shell would: 0, 75
(deferred), 124 (timeout), 130 (Ctrl+C), the job's own failure status...
"""

import os
import signal
import subprocess
import sys
import threading
from typing import List, Optional

GPUEXEC = os.environ.get("GPUEXEC_BIN") or "gpuexec"
POSIX = os.name == "posix"


def log(msg: str) -> None:
    print(f"[render] {msg}", file=sys.stderr, flush=True)


class NotStarted(int):
    """The status run_gpuexec returns when gpuexec itself could not be started:
    what a shell says then (127 not found, 126 not executable). The job
    never ran."""


def run_gpuexec(owner: str, slug: str, argv: List[str], wait: Optional[str] = None,
                timeout: Optional[str] = None) -> int:
    """Run argv under gpuexec and return gpuexec's exit status (a NotStarted
    when gpuexec itself could not be started).

    wait and timeout are passed as --wait and --timeout when given; when not,
    gpuexec reads GPUEXEC_WAIT / GPUEXEC_TIMEOUT, or uses its defaults (wait
    150m, no timeout).

    SIGINT/SIGTERM/SIGHUP reaching this process are forwarded to gpuexec,
    which passes them to the job, waits --kill-after, and releases the lock.
    We keep waiting until it has exited. Do NOT use subprocess.run() for this:
    on Ctrl+C it SIGKILLs its child, so gpuexec could not release the lock
    and the job's own process group would keep running.
    """
    cmd = [GPUEXEC, "--owner", owner, "--slug", slug]
    if wait is not None:
        cmd += ["--wait", wait]
    if timeout:
        cmd += ["--timeout", timeout]
    cmd += ["--", *argv]

    proc = None
    pending = []  # signals that arrived before gpuexec was started

    def forward(signum, _frame):
        # SIGHUP (terminal closed) is passed on as SIGTERM. gpuexec handles
        # SIGINT and SIGTERM.
        sig = signal.SIGTERM if signum == getattr(signal, "SIGHUP", None) else signum
        if proc is None:
            pending.append(sig)
            return
        log(f"got {signal.Signals(signum).name}, forwarding {signal.Signals(sig).name} to gpuexec (pid {proc.pid})")
        if POSIX and proc.poll() is None:
            proc.send_signal(sig)

    # Handlers go in BEFORE gpuexec starts: no signal is lost in between, and
    # a signal we catch is reset to default in the new process (one we
    # inherited as ignored, e.g. SIGINT in a background job, would stay
    # ignored).
    previous = {}
    if threading.current_thread() is threading.main_thread():  # signal.signal() needs it
        names = ("SIGINT", "SIGTERM", "SIGHUP") if POSIX else ("SIGINT",)
        for name in names:
            signum = getattr(signal, name)
            previous[signum] = signal.signal(signum, forward)
    try:
        if pending:  # interrupted before anything started
            return 128 + pending[0]
        try:
            # POSIX: own session/process group, so a Ctrl+C typed at the
            # terminal reaches only us and is forwarded exactly once (not
            # twice, from the terminal and from us). On Windows gpuexec shares
            # our console and receives Ctrl+C itself. Python cannot send it a
            # "soft" signal there anyway (terminate() is TerminateProcess), so
            # nothing is forwarded.
            proc = subprocess.Popen(cmd, start_new_session=POSIX)
        except FileNotFoundError:
            log(f"cannot run {GPUEXEC}: not found (set GPUEXEC_BIN or PATH)")
            return NotStarted(127)
        except PermissionError:
            log(f"cannot run {GPUEXEC}: permission denied")
            return NotStarted(126)
        if pending and POSIX:  # arrived while Popen() was starting gpuexec
            proc.send_signal(pending[0])
        status = proc.wait()  # PEP 475: retried after our handler runs
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    # Negative = gpuexec itself was killed by a signal; report it as a shell
    # would (128 + N).
    return 128 - status if status < 0 else status


def outcome(status: int) -> str:
    """Classify a gpuexec exit status, logging the details."""
    if isinstance(status, NotStarted):
        log("gpuexec itself " + ("was not found" if status == 127 else "cannot be run")
            + ": the job did not run")
        return "failed"
    if status == 0:
        return "done"
    if status == 75:
        log("GPU busy for the whole --wait: job DEFERRED, retry later")
        return "deferred"
    if status == 124:
        log("job ran past --timeout and was stopped")
        return "timeout"
    if status == 125:
        log("gpuexec itself failed (bad flags or unusable lock path, see its stderr)")
    elif status in (126, 127):
        log("job command " + ("not executable" if status == 126 else "not found"))
    elif status > 128:
        # 130/143 are also what gpuexec returns when interrupted while still
        # waiting for the lock; either way the job did not finish.
        try:
            name = signal.Signals(status - 128).name
        except ValueError:
            name = f"signal {status - 128}"
        log(f"job interrupted / killed by {name}")
    else:
        log(f"job exited with status {status}")
    return "failed"


def run_on_gpu(owner: str, slug: str, argv: List[str], wait: Optional[str] = None,
               timeout: Optional[str] = None) -> str:
    """Run argv on the shared GPU; return "done", "deferred", "timeout" or "failed"."""
    status = run_gpuexec(owner, slug, argv, wait=wait, timeout=timeout)
    result = outcome(status)
    log(f"{owner}/{slug}: {result} (gpuexec status {status})")
    return result


def mark_deferred(slug: str, retry_in_minutes: int = 30) -> None:
    """Stand-in for your job store: record that the job must be retried later."""
    # e.g. UPDATE jobs SET state = 'deferred', retry_at = now() + interval ...
    log(f"{slug}: marked DEFERRED, retry in {retry_in_minutes} min")


def main(args: List[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        print("usage: render_with_gpuexec.py SLUG -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    slug, argv = args[0], args[2:]
    owner = os.environ.get("RENDER_OWNER") or "channels"

    # --wait is left to GPUEXEC_WAIT (or gpuexec's default, 150m).
    status = run_gpuexec(owner, slug, argv, timeout="100m")
    result = outcome(status)
    log(f"{owner}/{slug}: {result} (gpuexec status {status})")
    if result == "deferred":
        mark_deferred(slug)
    # gpuexec's own status, so that whoever runs this script (cron, systemd,
    # a shell) tells a deferral (75) from a failure, and sees 130 after a
    # Ctrl+C as from any command.
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
