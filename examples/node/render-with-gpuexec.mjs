#!/usr/bin/env node
// Run one GPU job under gpuexec from Node (ESM, Node 20+, no dependencies),
// and act on gpuexec's exit status.
//
//   node render-with-gpuexec.mjs ep12 -- python3 render.py --episode ep12
//
// Environment:
//   GPUEXEC_BIN     gpuexec executable (default "gpuexec", looked up in PATH)
//   RENDER_OWNER    lock owner shown to other waiters (default "channels")
//   GPUEXEC_LOCK, GPUEXEC_WAIT, GPUEXEC_LOG, ...   read by gpuexec itself for
//                   the flags not given below (set GPUEXEC_LOCK to the lock
//                   every GPU user on the machine shares; GPUEXEC_WAIT=0 tries
//                   once and defers at once while the GPU is busy)
//
// Exit status: gpuexec's own, so whoever runs this script (cron, systemd, a
// parent autopilot) can tell a deferral (75) from a failure.

import { spawn } from 'node:child_process'
import { constants as osConstants } from 'node:os'
import { resolve as resolvePath } from 'node:path'
import { fileURLToPath } from 'node:url'

const GPUEXEC = process.env.GPUEXEC_BIN || 'gpuexec'

/**
 * Run argv under gpuexec. Resolves with { status, started } (never rejects):
 * gpuexec's exit status, and whether gpuexec itself started. When it could
 * not be started (not installed, not executable), status is what a shell
 * says then, 127 or 126, and started is false: the render never ran.
 * wait and timeout become --wait and --timeout when given; when not, gpuexec
 * reads GPUEXEC_WAIT / GPUEXEC_TIMEOUT, or uses its defaults (150m, none).
 * Signals: SIGINT/SIGTERM/SIGHUP that reach this process are forwarded to
 * gpuexec, which passes them on to the job, waits --kill-after, and releases
 * the lock. This process keeps running until gpuexec has exited.
 */
export function runUnderGpuexec({ owner, slug, argv, wait, timeout }) {
  const args = ['--owner', owner, '--slug', slug]
  if (wait !== undefined) args.push('--wait', wait)
  if (timeout) args.push('--timeout', timeout)
  args.push('--', ...argv)

  // POSIX: put gpuexec in its own session and process group (detached). A Ctrl+C typed
  // at the terminal then reaches only this process, and we forward it
  // exactly once. Otherwise gpuexec would get it twice, once from the
  // terminal and once from us. We still wait for gpuexec; it is not left
  // running on its own.
  // Windows: not detached (that would open a new console). Ctrl+C reaches
  // gpuexec through the shared console by itself, and child.kill() there
  // would be TerminateProcess, which gives gpuexec no chance to release the
  // lock. So nothing is forwarded on Windows.
  const posix = process.platform !== 'win32'
  let child = null

  const forward = (signal) => {
    // SIGHUP (terminal closed) is passed on as SIGTERM. gpuexec handles
    // SIGINT and SIGTERM.
    const sig = signal === 'SIGHUP' ? 'SIGTERM' : signal
    if (!posix) {
      console.error(`[render] got ${signal}; gpuexec receives it from the console, waiting for it to exit`)
      return
    }
    console.error(`[render] got ${signal}, forwarding ${sig} to gpuexec (pid ${child.pid})`)
    if (child.exitCode === null && child.signalCode === null) child.kill(sig)
  }
  // Handlers go in BEFORE gpuexec starts: a signal that arrives the moment
  // after would otherwise end this process with its default action and
  // leave gpuexec running on its own. (Node runs a handler only once the
  // code below has run, so child is set by then; the child itself starts
  // with default dispositions.)
  const signals = posix ? ['SIGINT', 'SIGTERM', 'SIGHUP'] : ['SIGINT']
  for (const s of signals) process.on(s, forward)
  child = spawn(GPUEXEC, args, { stdio: 'inherit', detached: posix })

  return new Promise((resolve) => {
    const done = (status) => {
      for (const s of signals) process.off(s, forward)
      resolve(status)
    }
    child.once('error', (err) => {
      // Spawning gpuexec itself failed (e.g. ENOENT: not installed / not in PATH).
      console.error(`[render] cannot run ${GPUEXEC}: ${err.message}`)
      done({ status: err.code === 'ENOENT' ? 127 : err.code === 'EACCES' ? 126 : 125, started: false })
    })
    child.once('exit', (code, signal) => {
      // gpuexec itself killed by a signal (e.g. SIGKILL): report it as the
      // shell does, 128 + signal number.
      done({ status: code ?? 128 + (osConstants.signals[signal] ?? 0), started: true })
    })
  })
}

/**
 * Map gpuexec's exit status to what this job runner should do; started is
 * false when gpuexec itself could not be started (see runUnderGpuexec).
 */
export function describe(status, started = true) {
  if (!started) {
    const why = status === 127 ? 'was not found (install it, or set GPUEXEC_BIN or PATH)' : 'cannot be run (see above)'
    return { outcome: 'failed', message: `gpuexec itself ${why}; the render did not run` }
  }
  if (status === 0) return { outcome: 'done', message: 'rendered' }
  if (status === 75) return { outcome: 'deferred', message: 'GPU busy for the whole --wait; deferred, retry later' }
  if (status === 124) return { outcome: 'timeout', message: 'render ran past --timeout and was stopped' }
  if (status === 125) return { outcome: 'failed', message: 'gpuexec itself failed (bad flags or unusable lock path, see its stderr)' }
  if (status === 126) return { outcome: 'failed', message: 'render command found but not executable' }
  if (status === 127) return { outcome: 'failed', message: 'render command not found' }
  if (status > 128) {
    const n = status - 128
    const name = Object.keys(osConstants.signals).find((k) => osConstants.signals[k] === n) ?? `signal ${n}`
    // 130/143 are also what gpuexec returns when interrupted while still
    // waiting for the lock; either way the job did not finish.
    return { outcome: 'failed', message: `interrupted / killed by ${name}` }
  }
  return { outcome: 'failed', message: `render exited with status ${status}` }
}

/** Stand-in for your job store: record that the job must be retried later. */
function markDeferred(slug, retryInMinutes = 30) {
  const retryAt = new Date(Date.now() + retryInMinutes * 60_000).toISOString()
  // e.g. UPDATE jobs SET state = 'deferred', retry_at = ... WHERE slug = ...
  console.error(`[render] ${slug}: marked DEFERRED, retry at ${retryAt}`)
}

async function main() {
  const sep = process.argv.indexOf('--')
  const slug = process.argv[2]
  if (sep !== 3 || sep === process.argv.length - 1) {
    console.error('usage: render-with-gpuexec.mjs SLUG -- COMMAND [ARG...]')
    return 2
  }
  const argv = process.argv.slice(sep + 1)
  const owner = process.env.RENDER_OWNER || 'channels'

  // --wait is left to GPUEXEC_WAIT (or gpuexec's default, 150m).
  const { status, started } = await runUnderGpuexec({ owner, slug, argv, timeout: '100m' })
  const { outcome, message } = describe(status, started)
  console.error(`[render] ${owner}/${slug}: ${outcome} (gpuexec status ${status}): ${message}`)
  if (outcome === 'deferred') markDeferred(slug)
  return status
}

// Run main() only when executed directly, not when imported for runUnderGpuexec.
if (process.argv[1] && resolvePath(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = await main()
}
