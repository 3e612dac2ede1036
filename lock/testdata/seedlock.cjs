'use strict'
// seedlock.cjs: a RE-CREATION, for gpuexec's interoperability tests, of the
// Node render lock described in the seed article ("好幾個 Claude 搶同一張顯卡：
// 用一個檔案寫跨程式渲染鎖"). It is NOT the original render-lock.cjs, which was
// not published in full. tryCreate and removeStale follow the article's quoted
// code nearly verbatim; the rest follows the article's prose:
//   - lock = openSync(p, 'wx'); content {pid, acquiredAt, owner, slug, token}
//   - queue, do not skip: retry every 20 s, log the holder every 5 min, give
//     up after 150 min
//   - heartbeat: utimesSync the lock every 5 min while held, timer unref()'d
//   - stale = mtime older than 90 min, or pid gone (process.kill(pid, 0):
//     ESRCH = gone, EPERM = alive); unreadable content counts as a lock
//     still being written
//   - clear a stale lock by renaming it aside, re-reading it, and deleting it
//     only if it is the same lock (token and pid); otherwise put it back
//   - release deletes the file only if pid and token match; hooked on
//     process 'exit', SIGINT and SIGTERM
//   - CLI: status, clear [--force]
//
// Deviations from the article (all for testing):
//   1. Timings come from the environment (milliseconds): SEEDLOCK_POLL_MS
//      (20 s), SEEDLOCK_REPORT_MS (5 min), SEEDLOCK_HEARTBEAT_MS (5 min),
//      SEEDLOCK_STALE_MS (90 min), SEEDLOCK_MAX_WAIT_MS (150 min); the
//      defaults are the article's.
//   2. An extra `run` subcommand (the article's CLI had only status and clear;
//      its users wrapped acquire() themselves):
//        node seedlock.cjs run <lockpath> <owner> <slug> <holdMs> [truthFile]
//      acquires (queueing), prints "ready <pid> <token> <epochMs>" on stdout,
//      holds holdMs ("-": until stdin closes), releases, prints
//      "released <epochMs>", exits 0; exits 75 when the max wait elapses.
//      SEEDLOCK_RUNS=n repeats acquire/hold/release n times (SEEDLOCK_GAP_MS
//      apart). With truthFile, each hold creates truthFile with 'wx' on entry
//      and deletes it on exit, checking it still holds what it wrote: a
//      failure means two holders overlapped; it prints "overlap ..." and exits 3.
//   3. The article elides the put-back branch of removeStale ("..."); it is
//      filled in with renameSync(tmp, p), which, like the seed, overwrites a
//      lock created at p meanwhile.
//   4. What the article calls "unreadable content counts" is rendered as: a
//      lock whose content does not parse is "being written" (held) until its
//      mtime passes the stale age. removeStale (verbatim) then never deletes
//      it, because judged.info is null: such a lock needs a manual `rm`.
//   5. Log lines go to stderr, in the article's wording where it quotes one;
//      `status` prints one English line.
//
// Zero dependencies. CommonJS.

const fs = require('fs')
const crypto = require('crypto')

const env = (name, def) => {
  const v = process.env[name]
  if (v === undefined || v === '') return def
  const n = Number(v)
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number of ms, not ${v}`)
  return n
}
const MIN = 60 * 1000
const POLL_MS = env('SEEDLOCK_POLL_MS', 20 * 1000)
const REPORT_MS = env('SEEDLOCK_REPORT_MS', 5 * MIN)
const HEARTBEAT_MS = env('SEEDLOCK_HEARTBEAT_MS', 5 * MIN)
const STALE_MS = env('SEEDLOCK_STALE_MS', 90 * MIN)
const MAX_WAIT_MS = env('SEEDLOCK_MAX_WAIT_MS', 150 * MIN)

const defaultLog = (msg) => process.stderr.write(`[render-lock] ${msg}\n`)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const hhmm = (iso) => {
  const d = new Date(iso)
  if (Number.isNaN(d.getTime())) return '?'
  return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`
}

function tryCreate(p, owner, slug) {
  const token = crypto.randomBytes(8).toString('hex')
  let fd
  try { fd = fs.openSync(p, 'wx') } catch (e) { if (e.code === 'EEXIST') return null; throw e }
  try {
    fs.writeSync(fd, JSON.stringify({ pid: process.pid, acquiredAt: new Date().toISOString(), owner, slug, token }))
  } finally { fs.closeSync(fd) }
  return token
}

function pidAlive(pid) {
  try { process.kill(pid, 0); return true } catch (e) { return e.code === 'EPERM' }
}

// judge reads the lock at p: { free } | { stale, info, why, mtimeMs }.
function judge(p) {
  let st, raw
  try { st = fs.statSync(p); raw = fs.readFileSync(p, 'utf8') } catch (e) {
    if (e.code === 'ENOENT') return { free: true }
    throw e
  }
  let info = null
  try { info = JSON.parse(raw) } catch {}
  if (!info || typeof info !== 'object' || typeof info.pid !== 'number') info = null
  const age = Date.now() - st.mtimeMs
  if (age > STALE_MS) return { stale: true, info, mtimeMs: st.mtimeMs, why: `鎖檔 ${Math.round(age / MIN)} 分鐘沒心跳` }
  if (!info) return { stale: false, info, mtimeMs: st.mtimeMs, why: '鎖檔內容還沒寫進去' }
  if (!pidAlive(info.pid)) return { stale: true, info, mtimeMs: st.mtimeMs, why: `pid ${info.pid} 已經不存在` }
  return { stale: false, info, mtimeMs: st.mtimeMs, why: '' }
}

function removeStale(p, judged, log) {
  const tmp = `${p}.stale-${process.pid}-${crypto.randomBytes(3).toString('hex')}`
  try { fs.renameSync(p, tmp) } catch { return false }
  let got = null
  try { got = JSON.parse(fs.readFileSync(tmp, 'utf8')) } catch {}
  const same = judged.info && got && got.token === judged.info.token && got.pid === judged.info.pid
  if (!same) { /* 搶到別人剛建的新鎖：放回去 */ try { fs.renameSync(tmp, p) } catch {} return false }
  fs.unlinkSync(tmp)
  log(`渲染鎖死鎖自清：${judged.why}`)
  return true
}

// Locks this process holds, released on every exit path.
const held = new Map() // token -> { p, timer }

function release(p, token) {
  const h = held.get(token)
  if (h) { clearInterval(h.timer); held.delete(token) }
  let got = null
  try { got = JSON.parse(fs.readFileSync(p, 'utf8')) } catch { return false }
  if (!got || got.pid !== process.pid || got.token !== token) return false
  try { fs.unlinkSync(p); return true } catch { return false }
}

let hooked = false
function hookExits() {
  if (hooked) return
  hooked = true
  const releaseAll = () => { for (const [token, h] of [...held]) release(h.p, token) }
  process.on('exit', releaseAll)
  process.on('SIGINT', () => { releaseAll(); process.exit(130) })
  process.on('SIGTERM', () => { releaseAll(); process.exit(143) })
}

function holderLine(j) {
  if (!j.info) return `（${j.why}）`
  return `${j.info.owner}/${j.info.slug} (pid ${j.info.pid})`
}

// acquire queues until it holds the lock; rejects with code LOCK_TIMEOUT
// after maxWaitMs.
async function acquire(p, owner, slug, opts = {}) {
  const log = opts.log || defaultLog
  const pollMs = opts.pollMs ?? POLL_MS
  const maxWaitMs = opts.maxWaitMs ?? MAX_WAIT_MS
  const start = Date.now()
  let lastReport = -Infinity
  for (;;) {
    const token = tryCreate(p, owner, slug)
    if (token) {
      hookExits()
      const timer = setInterval(() => { const now = new Date(); try { fs.utimesSync(p, now, now) } catch {} }, HEARTBEAT_MS)
      timer.unref()
      held.set(token, { p, timer })
      return { token, release: () => release(p, token) }
    }
    const j = judge(p)
    if (j.free) continue
    if (j.stale && removeStale(p, j, log)) continue
    const now = Date.now()
    if (now - start >= maxWaitMs) {
      const e = new Error(`等渲染鎖超過 ${Math.round(maxWaitMs / MIN)} 分鐘，持有者 ${holderLine(j)}`)
      e.code = 'LOCK_TIMEOUT'
      throw e
    }
    if (now - lastReport >= REPORT_MS) {
      lastReport = now
      log(`等渲染鎖，持有者 ${holderLine(j)} 自 ${j.info ? hhmm(j.info.acquiredAt) : '?'}`)
    }
    await sleep(Math.min(pollMs, Math.max(0, start + maxWaitMs - now)))
  }
}

async function withLock(p, owner, slug, fn, opts) {
  const h = await acquire(p, owner, slug, opts)
  try { return await fn() } finally { h.release() }
}

function status(p) {
  const j = judge(p)
  if (j.free) return 'free'
  const mins = Math.floor((Date.now() - j.mtimeMs) / MIN)
  let s = j.info ? `held by ${holderLine(j)} since ${hhmm(j.info.acquiredAt)}` : 'held by an unreadable lock record'
  s += `, heartbeat ${mins} min ago, `
  s += j.stale ? `stale: ${j.why}` : (j.why ? `alive (${j.why})` : 'alive')
  return s
}

function clear(p, force, log = defaultLog) {
  const j = judge(p)
  if (j.free) return { code: 0, msg: 'free' }
  if (!j.stale && !force) return { code: 1, msg: `refused: ${holderLine(j)} is alive; use --force` }
  const judged = j.stale ? j : { ...j, why: '手動 --force' }
  if (removeStale(p, judged, log)) return { code: 0, msg: `cleared: ${judged.why}` }
  return { code: 1, msg: 'not cleared: the lock changed or could not be verified' }
}

async function runCmd(p, owner, slug, holdArg, truthFile) {
  const runs = env('SEEDLOCK_RUNS', 1)
  const gap = env('SEEDLOCK_GAP_MS', 0)
  const stdinClosed = holdArg === '-' ? new Promise((r) => { process.stdin.on('end', r); process.stdin.on('error', r); process.stdin.resume() }) : null
  const holdMs = holdArg === '-' ? 0 : Number(holdArg)
  if (!Number.isFinite(holdMs) || holdMs < 0) throw new Error(`bad holdMs ${holdArg}`)
  for (let i = 0; i < runs; i++) {
    let h
    try { h = await acquire(p, owner, slug) } catch (e) {
      if (e.code === 'LOCK_TIMEOUT') { defaultLog(e.message); process.exit(75) }
      throw e
    }
    process.stdout.write(`ready ${process.pid} ${h.token} ${Date.now()}\n`)
    const me = `node ${process.pid} ${h.token}`
    if (truthFile) {
      try { fs.writeFileSync(truthFile, me, { flag: 'wx' }) } catch (e) {
        let other = ''
        try { other = fs.readFileSync(truthFile, 'utf8') } catch {}
        process.stdout.write(`overlap on entry: ${e.code}: inside is ${JSON.stringify(other)}\n`)
        process.exit(3)
      }
    }
    if (stdinClosed) await stdinClosed
    else await sleep(holdMs)
    if (truthFile) {
      let got = null
      try { got = fs.readFileSync(truthFile, 'utf8') } catch (e) { got = `<${e.code}>` }
      if (got !== me) { process.stdout.write(`overlap on exit: inside is ${JSON.stringify(got)}\n`); process.exit(3) }
      fs.unlinkSync(truthFile)
    }
    h.release()
    process.stdout.write(`released ${Date.now()}\n`)
    if (gap > 0 && i + 1 < runs) await sleep(gap)
  }
  if (stdinClosed) process.stdin.pause()
  process.exit(0)
}

function usage() {
  process.stderr.write('usage: seedlock.cjs status <lockpath> | clear <lockpath> [--force] | run <lockpath> <owner> <slug> <holdMs|-> [truthFile]\n')
  process.exit(2)
}

if (require.main === module) {
  const [cmd, p, ...rest] = process.argv.slice(2)
  if (!cmd || !p) usage()
  if (cmd === 'status') {
    process.stdout.write(status(p) + '\n')
  } else if (cmd === 'clear') {
    const r = clear(p, rest.includes('--force'))
    process.stdout.write(r.msg + '\n')
    process.exitCode = r.code
  } else if (cmd === 'run') {
    if (rest.length < 3) usage()
    runCmd(p, rest[0], rest[1], rest[2], rest[3]).catch((e) => { defaultLog(String(e && e.stack || e)); process.exit(1) })
  } else usage()
}

module.exports = { tryCreate, removeStale, judge, acquire, release, withLock, status, clear }
