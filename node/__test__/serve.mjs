// Starts `leasebeat serve` (the reference Cycles server) on 127.0.0.1 for a
// test, and reads its request log. The binary is LEASEBEAT_BIN (set by
// scripts/test-node.sh), else target/{release,debug}/leasebeat of the
// repository this file sits in.
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createInterface } from 'node:readline'

const here = dirname(fileURLToPath(import.meta.url))

/** The `leasebeat` binary, or null when none is built. */
export function serverBinary () {
  if (process.env.LEASEBEAT_BIN) return process.env.LEASEBEAT_BIN
  for (const profile of ['release', 'debug']) {
    const p = resolve(here, '..', '..', 'target', profile, 'leasebeat')
    if (existsSync(p)) return p
  }
  return null
}

export const API_KEY = 'test-key'

/** A create request body (the fields the reference server requires). */
export function createBody (key, ttlMs, extra = {}) {
  return JSON.stringify({
    idempotency_key: key,
    ttl_ms: ttlMs,
    subject: { tenant: 'acme' },
    action: { kind: 'llm.completion', name: 'test' },
    estimate: { unit: 'TOKENS', amount: 1000 },
    ...extra
  })
}

/**
 * Starts a server with these extra flags (e.g. `--max-lead-ms 6000`,
 * `--fault extend:2=503`). Resolves to `{ url, log(), lapses(), kill(),
 * close() }` once it listens. `{ anyKey: true }`: accept any non-empty API
 * key (a key rotation); `{ wallClock: true }`: the log's times on the wall
 * clock (within `clockLagMs`).
 */
export async function startServer (flags = [], { anyKey = false, wallClock = false } = {}) {
  const bin = serverBinary()
  if (bin === null) throw new Error('no leasebeat binary: set LEASEBEAT_BIN or run cargo build -p leasebeat-cli')
  const dir = mkdtempSync(join(tmpdir(), 'leasebeat-node-serve-'))
  const logPath = join(dir, 'requests.jsonl')
  const keyFlags = anyKey ? [] : ['--api-key', API_KEY]
  // wallClock: the server's clock (arrived_ms, t_ms) starts at the wall clock
  // read just before the spawn, so it lags the wall clock by at most the
  // time until it listens (`clockLagMs`).
  const spawnedAt = Date.now()
  if (wallClock) keyFlags.push('--epoch-ms', String(spawnedAt))
  const child = spawn(bin, ['serve', '--bind', '127.0.0.1:0', ...keyFlags, '--log', logPath, ...flags], {
    stdio: ['ignore', 'pipe', 'pipe']
  })
  // Never leave a server behind, even if the test process ends abruptly.
  const reap = () => child.kill('SIGKILL')
  process.once('exit', reap)
  const stdoutLines = []
  let stderr = ''
  child.stderr.on('data', (b) => { stderr += b })
  const lines = createInterface({ input: child.stdout })
  const url = await new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code) => reject(new Error(`leasebeat serve exited (${code}): ${stderr}`)))
    lines.on('line', (line) => {
      stdoutLines.push(line)
      const m = /^listening on (http:\/\/\S+)/.exec(line)
      if (m) resolve(m[1])
    })
  })
  child.removeAllListeners('exit')
  // The runner's timers are unref'd (it never keeps a process alive on its
  // own): keep this test process alive until the server is closed, even
  // after the server was killed on purpose.
  const keepAlive = setInterval(() => {}, 1 << 30)
  let exited = false
  const gone = new Promise((resolve) => child.once('exit', () => { exited = true; resolve() }))
  const clockLagMs = Date.now() - spawnedAt
  return {
    url,
    child,
    clockLagMs,
    /** Every log entry so far (one JSON object per line). */
    log () {
      if (!existsSync(logPath)) return []
      return readFileSync(logPath, 'utf8').split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l))
    },
    /** The request entries for one endpoint ('create', 'extend', 'release', ...). */
    requests (endpoint) {
      return this.log().filter((e) => e.event === 'request' && (endpoint === undefined || e.endpoint === endpoint))
    },
    /** The lapse entries: reservations that expired while still active. */
    lapses () {
      return this.log().filter((e) => e.event === 'lapse')
    },
    /** Resolves once `pred(this)` holds (polling the log), or throws after `ms`. */
    async until (pred, ms = 20000) {
      const end = performance.now() + ms
      while (!pred(this)) {
        if (performance.now() > end) throw new Error('the server log never reached the expected state')
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
    },
    /** Kills the server (SIGKILL) and waits for it to exit. */
    async kill () {
      if (!exited) child.kill('SIGKILL')
      await gone
    },
    /** Kills the server and removes its log. */
    async close () {
      clearInterval(keepAlive)
      process.removeListener('exit', reap)
      await this.kill()
      rmSync(dir, { recursive: true, force: true })
    }
  }
}
