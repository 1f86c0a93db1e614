// The ready heartbeat loop for Node.js around the sans-IO core (hand-written,
// CommonJS). It holds no rule: it only waits for the due time, performs the
// attempt through a transport, enforces the whole-attempt deadline, feeds the
// outcome back to the core and reports every decision. See README.md,
// "The runner", and runner.d.ts for the documented API.
'use strict'

const { Heartbeat, Settlement, Journal } = require('./index.js')

/** `provenUntilNs` of a lease proven alive forever (receipt + lead overflowed). */
const PROVEN_FOREVER_NS = 2n ** 64n - 1n

/** Setting a JavaScript timer beyond this many ms fires it at once. */
const MAX_TIMER_MS = 2 ** 31 - 1
/** Timer slack bounds (ms): as the Rust driver, 0.2 ms .. 20 ms, from 1 ms. */
const MIN_SLACK_MS = 0.2
const MAX_SLACK_MS = 20
/** Time allowed, within the attempt timeout, for a fired deadline to be observed. */
const WAKEUP_ALLOWANCE_MS = 30

/**
 * The timer slack of this process's event loop: the largest recent oversleep
 * of the runner's own timers (ms), decaying by 1/8 per measurement, within
 * 0.2 .. 20 ms. Beats are sent early by it, and deadlines fire early by it.
 */
let timerSlackMs = 1

function noteOversleep (overMs) {
  timerSlackMs = Math.min(MAX_SLACK_MS, Math.max(MIN_SLACK_MS, timerSlackMs - timerSlackMs / 8, overMs))
}

/** The current measured timer slack in ms (for diagnostics and tests). */
function timerSlack () {
  return timerSlackMs
}

/**
 * How long before the configured per-attempt timeout the runner fires its
 * own deadline, so that a timed-out attempt is observed no later than
 * `sent + requestTimeoutMs`: the measured timer slack plus a 30 ms wake-up
 * allowance, and never more than a tenth of the timeout.
 */
function detectionSlackMs (timeoutMs) {
  return Math.min(timeoutMs / 10, timerSlackMs + WAKEUP_ALLOWANCE_MS)
}

/** A transport failure: `kind` is `'timeout'`, `'connect'` or `'reset'`. */
class TransportError extends Error {
  constructor (kind, message, options) {
    super(message ?? `transport failure: ${kind}`, options)
    if (kind !== 'timeout' && kind !== 'connect' && kind !== 'reset') {
      throw new TypeError(`TransportError kind must be 'timeout', 'connect' or 'reset', got ${String(kind)}`)
    }
    this.name = 'TransportError'
    this.kind = kind
    this.code = 'ERR_LEASEBEAT_TRANSPORT'
  }
}

/**
 * The largest response body the default transport reads (1 MiB), as the Rust
 * driver's `MAX_BODY_BYTES`. A longer body (declared by `content-length`, or
 * found while reading a chunked or close-delimited body) is not read further:
 * the body stream is cancelled, which closes the connection, and the response
 * resolves with its status, its headers and an empty body, which the core
 * classifies by status as a response without a usable body (P-3: a 200 is then
 * ambiguous, a 404 `not_found`).
 */
const MAX_BODY_BYTES = 1024 * 1024

/** The declared `content-length` of a fetch response's headers, or null. */
function declaredLength (headers) {
  let v = null
  if (headers != null && typeof headers.get === 'function') {
    v = headers.get('content-length')
  } else if (headers != null && typeof headers[Symbol.iterator] === 'function') {
    for (const [name, value] of headers) if (String(name).toLowerCase() === 'content-length') v = value
  }
  return typeof v === 'string' && /^\s*\d+\s*$/.test(v) ? Number(v) : null
}

const EMPTY = new Uint8Array(0)

/**
 * Reads a fetch response's body, at most MAX_BODY_BYTES of it (see there).
 * The signal the fetch was given aborts a read in progress.
 */
async function readCapped (res) {
  const declared = declaredLength(res.headers)
  const stream = res.body
  const streaming = stream != null && typeof stream.getReader === 'function'
  if (declared !== null && declared > MAX_BODY_BYTES) {
    if (streaming) await stream.cancel().catch(() => {})
    return EMPTY
  }
  if (!streaming) {
    // A fetch without a body stream (the caller's): read whole, then capped.
    const all = new Uint8Array(await res.arrayBuffer())
    return all.byteLength > MAX_BODY_BYTES ? EMPTY : all
  }
  const reader = stream.getReader()
  const parts = []
  let n = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    n += value.byteLength
    if (n > MAX_BODY_BYTES) {
      await reader.cancel().catch(() => {})
      return EMPTY
    }
    parts.push(value)
  }
  if (parts.length === 1) return parts[0]
  const body = new Uint8Array(n)
  let at = 0
  for (const p of parts) {
    body.set(p, at)
    at += p.byteLength
  }
  return body
}

const CONNECT_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT', 'EADDRNOTAVAIL'])

/** Maps an error thrown by fetch (or by reading its body) to a transport failure kind. */
function fetchFailureKind (err, signal) {
  if (signal !== undefined && signal.aborted) return 'timeout'
  let e = err
  for (let depth = 0; e != null && depth < 5; depth++) {
    if (e.name === 'TimeoutError') return 'timeout'
    if (typeof e.code === 'string' && CONNECT_CODES.has(e.code)) return 'connect'
    e = e.cause
  }
  return 'reset'
}

/**
 * The default transport: the global `fetch` against a Cycles server. Sends
 * `POST {baseUrl}/v1/reservations` (create) and
 * `POST {baseUrl}/v1/reservations/{id}/{extend|release|commit}` with
 * `X-Cycles-API-Key`, `X-Idempotency-Key` and the body; reads the body up to
 * MAX_BODY_BYTES (1 MiB; a longer body is not read and resolves as an empty
 * body, as the Rust driver); aborts the whole attempt (connect, send, response, body) with the
 * signal it is given, and maps failures to `TransportError`.
 */
function fetchTransport (options) {
  if (options === null || typeof options !== 'object') throw new TypeError('fetchTransport options must be an object { baseUrl, apiKey, fetch? }')
  const { baseUrl, apiKey } = options
  const doFetch = options.fetch ?? globalThis.fetch
  if (typeof baseUrl !== 'string' || !/^https?:\/\//.test(baseUrl)) throw new TypeError(`baseUrl must be an http(s) URL string, got ${typeof baseUrl === 'string' ? JSON.stringify(baseUrl) : typeof baseUrl}`)
  if (typeof apiKey !== 'string' || apiKey.length === 0) throw new TypeError('apiKey must be a non-empty string')
  if (typeof doFetch !== 'function') throw new TypeError('fetch must be a function (the global fetch needs Node.js >= 18)')
  const base = baseUrl.replace(/\/+$/, '')
  return async function fetchAttempt (request, signal) {
    const path = request.kind === 'create'
      ? '/v1/reservations'
      : request.kind === 'event'
        ? '/v1/events'
        : `/v1/reservations/${encodeURIComponent(request.reservationId)}/${request.kind}`
    try {
      const res = await doFetch(base + path, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-cycles-api-key': apiKey,
          'x-idempotency-key': request.key
        },
        body: request.body,
        signal
      })
      const body = await readCapped(res)
      return { status: res.status, headers: res.headers, body }
    } catch (err) {
      if (err instanceof TransportError) throw err
      throw new TransportError(fetchFailureKind(err, signal), `${request.kind} ${path}: ${err?.message ?? err}`, { cause: err })
    }
  }
}

/** Resolves after `ms` (an unref'd timer), or when `signal` aborts. Returns the oversleep in ms. */
function sleep (ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(0)
    const start = performance.now()
    const wait = Math.min(Math.max(0, ms), MAX_TIMER_MS)
    const onAbort = () => {
      clearTimeout(timer)
      resolve(0)
    }
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort)
      const over = performance.now() - start - wait
      noteOversleep(over)
      resolve(over)
    }, wait)
    timer.unref()
    signal.addEventListener('abort', onAbort, { once: true })
  })
}

const running = new WeakSet()
// Stops after which nothing is left to release or commit. After `expired` the
// release or commit is sent all the same: a server may accept it for a grace
// period after expiry (the Cycles server does, for 5 s); its answer is reported.
const NO_RELEASE = new Set(['finalized', 'not_found', 'create_failed', 'create_rejected', 'no_reservation'])

function check (cond, message) {
  if (!cond) throw new TypeError(message)
}

const RUN_OPTIONS = ['transport', 'baseUrl', 'apiKey', 'signal', 'onDecision', 'onJeopardy', 'onFinalize', 'finalize', 'clock', 'journal', 'tenant']

function validate (heartbeat, options, fn = 'runHeartbeat', allowed = RUN_OPTIONS) {
  check(heartbeat instanceof Heartbeat, `${fn}: heartbeat must be a Heartbeat`)
  check(options === undefined || (options !== null && typeof options === 'object'), `${fn}: options must be an object`)
  const o = options ?? {}
  for (const k of Object.keys(o)) check(allowed.includes(k), `${fn}: unknown option ${JSON.stringify(k)} (allowed: ${allowed.join(', ')})`)
  for (const k of ['transport', 'onDecision', 'onJeopardy', 'onFinalize', 'clock', 'onHeartbeatFailure', 'onSettlementDecision']) {
    check(o[k] === undefined || typeof o[k] === 'function', `${fn}: options.${k} must be a function`)
  }
  check(o.signal === undefined || o.signal instanceof AbortSignal, 'runHeartbeat: options.signal must be an AbortSignal')
  const f = o.finalize
  check(f === undefined || f === null || f === 'release' || (typeof f === 'object' && f.commit !== null && typeof f.commit === 'object'),
    "runHeartbeat: options.finalize must be 'release', { commit: { actual, ... } } or null")
  if (o.transport === undefined) {
    check(o.baseUrl !== undefined, 'runHeartbeat: give options.transport, or options.baseUrl and options.apiKey for the default fetch transport')
  } else {
    check(o.baseUrl === undefined && o.apiKey === undefined, 'runHeartbeat: options.baseUrl/apiKey are for the default transport; do not combine them with options.transport')
  }
  return o
}

/**
 * Runs one lease to its stop. See runner.d.ts for the documentation.
 */
async function runHeartbeat (heartbeat, options) {
  const o = validate(heartbeat, options)
  claimHeartbeat(heartbeat, 'runHeartbeat')
  check(o.journal === undefined || o.journal === false || (o.journal !== null && typeof o.journal === 'object'), 'runHeartbeat: options.journal must be { dir?, tenant? } or false')
  const transport = o.transport ?? fetchTransport({ baseUrl: o.baseUrl, apiKey: o.apiKey })
  let eventBody = null
  const stop = await heartbeatLoop(heartbeat, o, transport, { onAttempt: (a) => { if (a.kind === 'create' && eventBody === null) eventBody = subjectAction(a.body) } })
  if (o.finalize != null && heartbeat.reservationId !== null && !NO_RELEASE.has(stop.reason)) {
    await finalize(heartbeat, o, transport, report, eventBody)
  }
  return stop
}

/** `{ subject, action }` of a create body (for the event fallback), or null. */
function subjectAction (body) {
  try {
    const b = JSON.parse(new TextDecoder().decode(body))
    return b.subject != null && b.action != null ? { subject: b.subject, action: b.action } : null
  } catch {
    return null
  }
}

/** Marks `heartbeat` as run (once), after checking it has nothing in flight. */
function claimHeartbeat (heartbeat, fn) {
  if (running.has(heartbeat)) throw new Error(`${fn}: this Heartbeat is already being run`)
  const first = heartbeat.pollAction()
  if (first.type === 'await') throw new Error(`${fn}: attempt ${first.attempt.id} is in flight; report its outcome before running the heartbeat`)
  running.add(heartbeat)
}

/** Calls a listener; a listener's bug is surfaced as a process warning, never thrown. */
function report (fn, arg) {
  if (fn === undefined) return
  try {
    fn(arg)
  } catch (err) {
    // A listener's bug must not stop the heartbeat: surface it without
    // unwinding the loop.
    process.emitWarning(`leasebeat runner listener threw: ${err?.stack ?? err}`, 'LeasebeatListenerWarning')
  }
}

/**
 * The heartbeat loop of one lease (`runHeartbeat` and `startLease`): runs
 * until the heartbeat stops and resolves to the stop decision. `hooks`:
 * `onAttempt(attempt)` before each send (internal).
 */
async function heartbeatLoop (heartbeat, o, transport, hooks) {
  const clock = o.clock ?? (() => performance.now())
  const userSignal = o.signal ?? new AbortController().signal
  // Aborted when the runner stops, for whatever reason: ends every wait.
  const done = new AbortController()
  const onUserAbort = () => done.abort()
  if (userSignal.aborted) done.abort()
  else userSignal.addEventListener('abort', onUserAbort, { once: true })

  // Jeopardy (D-15): reaching provenUntil without a newer success. After the
  // first success, a decision without provenUntil (the fallback path: an older
  // server, nothing proven) counts as proven until 0: reported at once, once,
  // and re-armed when a later decision carries a different provenUntil.
  let jeopardyTimer = null
  let successes = 0
  let armedFor = null
  let reported = false
  const armJeopardy = (d) => {
    if (jeopardyTimer !== null) clearTimeout(jeopardyTimer)
    jeopardyTimer = null
    const fallback = d.provenUntilNs === null && successes > 0
    const key = fallback ? 0n : d.provenUntilNs
    if (key !== armedFor) {
      armedFor = key
      reported = false
    }
    if (d.next === 'stop' || key === null || key === PROVEN_FOREVER_NS || reported) return
    const provenUntil = fallback ? 0 : d.provenUntil
    const generation = successes
    const fire = () => {
      jeopardyTimer = null
      if (done.signal.aborted || generation !== successes || reported) return
      const now = clock()
      const nowMs = typeof now === 'bigint' ? Number(now) / 1e6 : now
      if (nowMs < provenUntil) {
        jeopardyTimer = setTimeout(fire, Math.min(MAX_TIMER_MS, provenUntil - nowMs)).unref()
        return
      }
      reported = true
      const event = { event: 'lease_in_jeopardy', cause: 'proven_until_reached', reservationId: heartbeat.reservationId, at: nowMs }
      if (!fallback) event.provenUntil = provenUntil
      report(o.onJeopardy, event)
    }
    const nowMs = toMs(clock())
    // Already reached (the fallback path, a lead of 0): report now, not from
    // a timer. A setTimeout(0) waits at least 1 ms, and a loopback response
    // can arrive first: the report must come before anything the server says.
    if (nowMs >= provenUntil) {
      fire()
      return
    }
    jeopardyTimer = setTimeout(fire, Math.min(MAX_TIMER_MS, Math.max(0, provenUntil - nowMs - timerSlackMs))).unref()
  }
  const toMs = (t) => (typeof t === 'bigint' ? Number(t) / 1e6 : t)

  const decide = (d) => {
    if (d.outcome === 'success') successes++
    // The decision first: a jeopardy it leaves already reached follows it at once.
    report(o.onDecision, d)
    armJeopardy(d)
    return d
  }

  let stop = null
  try {
    const last = heartbeat.lastDecision
    if (last !== null && last.next !== 'stop') {
      if (last.outcome === 'success') successes++ // an adopted create
      armJeopardy(last)
    }
    for (;;) {
      const action = heartbeat.pollAction()
      if (action.type === 'stop') {
        stop = heartbeat.lastDecision
        break
      }
      if (action.type === 'await') throw new Error('runHeartbeat: the heartbeat has an attempt in flight that this runner did not send')
      const attempt = action.attempt
      // A heartbeat that has not decided yet (a create, or the first
      // extension of an adopted reservation) asks for its first send "at 0",
      // i.e. at once: not a beat a decision scheduled, so never late (D-15).
      const scheduled = heartbeat.lastDecision !== null
      // Wait for the due time, early by the measured timer slack.
      while (!done.signal.aborted) {
        if (attempt.dueMs === Infinity) {
          await sleep(MAX_TIMER_MS, done.signal)
          continue
        }
        const wait = attempt.dueMs - toMs(clock()) - timerSlackMs
        if (wait <= 0) break
        await sleep(wait, done.signal)
      }
      if (done.signal.aborted) {
        stop = decide(heartbeat.cancel(clock()))
        break
      }
      const sent = clock()
      const sentMs = toMs(sent)
      const margin = heartbeat.lastDecision?.numbers.safetyMargin
      const marginMs = typeof margin === 'number' ? margin : 1000
      if (scheduled && attempt.keyUse === 'new' && attempt.kind === 'extend' && sentMs - attempt.dueMs > marginMs) {
        report(o.onJeopardy, { event: 'lease_in_jeopardy', cause: 'late_beat', reservationId: heartbeat.reservationId, due: attempt.dueMs, at: sentMs, lateMs: sentMs - attempt.dueMs })
      }
      if (hooks.onAttempt !== undefined) hooks.onAttempt(attempt)
      heartbeat.handleSent(attempt.id, sent)
      const outcome = await perform(heartbeat, attempt, transport, done.signal, sentMs, toMs, clock)
      if (done.signal.aborted) {
        // The caller stopped while the attempt was in flight: its late
        // outcome is ignored.
        stop = decide(heartbeat.cancel(clock()))
        break
      }
      const d = outcome.response !== undefined
        ? heartbeat.handleResponse(attempt.id, outcome.response, outcome.at)
        : heartbeat.handleFailure(attempt.id, outcome.failure, outcome.at)
      decide(d)
    }
  } finally {
    if (jeopardyTimer !== null) clearTimeout(jeopardyTimer)
    userSignal.removeEventListener('abort', onUserAbort)
    done.abort()
    running.delete(heartbeat)
  }
  return stop
}

/**
 * Performs one attempt, racing the transport against the attempt deadline
 * (`sent + requestTimeoutMs`, fired early by the detection slack) and the
 * runner's stop. Resolves to `{ response, at }` or `{ failure, at }`.
 */
function perform (heartbeat, attempt, transport, stopSignal, sentMs, toMs, clock) {
  const timeoutMs = heartbeat.requestTimeoutMs
  const bounded = typeof timeoutMs === 'number' && Number.isFinite(timeoutMs)
  const attemptAbort = new AbortController()
  return new Promise((resolve) => {
    let settled = false
    let deadline = null
    const finish = (outcome) => {
      if (settled) return
      settled = true
      if (deadline !== null) clearTimeout(deadline)
      stopSignal.removeEventListener('abort', onStop)
      resolve(outcome)
    }
    const onStop = () => {
      attemptAbort.abort()
      finish({ failure: 'reset', at: clock() })
    }
    stopSignal.addEventListener('abort', onStop, { once: true })
    let signal = attemptAbort.signal
    if (bounded) {
      const enforceMs = Math.max(1, timeoutMs - detectionSlackMs(timeoutMs))
      const remaining = Math.max(0, sentMs + enforceMs - toMs(clock()))
      signal = AbortSignal.any([attemptAbort.signal, AbortSignal.timeout(Math.max(1, Math.floor(remaining)))])
      const start = performance.now()
      deadline = setTimeout(() => {
        noteOversleep(performance.now() - start - remaining)
        attemptAbort.abort()
        finish({ failure: 'timeout', at: clock() })
      }, remaining)
      deadline.unref()
    }
    const request = {
      kind: attempt.kind,
      reservationId: heartbeat.reservationId,
      key: attempt.key,
      body: attempt.body,
      attempt
    }
    let p
    try {
      p = Promise.resolve(transport(request, signal))
    } catch (err) {
      p = Promise.reject(err)
    }
    p.then(
      (res) => {
        if (res === null || typeof res !== 'object' || typeof res.status !== 'number') {
          finish({ failure: 'reset', at: clock() })
          process.emitWarning('leasebeat runner: the transport resolved to something other than { status, headers, body }; counted as a reset', 'LeasebeatTransportWarning')
          return
        }
        const response = { status: res.status }
        if (res.headers !== undefined) response.headers = res.headers
        if (res.body !== undefined) response.body = res.body
        finish({ response, at: clock() })
      },
      (err) => {
        const kind = err instanceof TransportError
          ? err.kind
          : (signal.aborted ? 'timeout' : 'reset')
        finish({ failure: kind, at: clock() })
      }
    )
  })
}

/** Releases or commits the reservation after the stop, through the transport. */
async function finalize (heartbeat, o, transport, report, eventBody) {
  // Through the core's Settlement (ST-1..ST-11: one key, retries, Retry-After,
  // the event fallback when the create's subject and action are known) and,
  // for a commit, the journal (J-1: the record before the first request).
  const commit = o.finalize !== 'release'
  const reservationId = heartbeat.reservationId
  let result
  try {
    const settler = new Settler({
      baseUrl: o.baseUrl ?? 'http://localhost',
      apiKey: o.apiKey ?? '',
      transport,
      journal: commit ? (o.journal ?? {}) : false,
      tenant: o.tenant,
      replay: false
    })
    const settlement = commit
      ? new Settlement({ reservationId, baseUrl: settler.baseUrl, commit: o.finalize.commit, event: eventBody }, performance.now(), Date.now())
      : new Settlement({ reservationId, baseUrl: settler.baseUrl, release: true }, performance.now(), Date.now())
    const r = await settler.settle(settlement)
    result = { kind: commit ? 'commit' : 'release', reservationId, key: r.key, status: r.status, error: null, outcome: r.outcome, result: r }
  } catch (err) {
    result = { kind: commit ? 'commit' : 'release', reservationId, key: null, status: null, error: err, outcome: null, result: null }
  }
  report(o.onFinalize, result)
}

// ----- settlement through the journal (issue 27) -----

/**
 * `err instanceof JournalError` holds for every error a `Journal` throws for
 * what the file system refuses (code `ERR_LEASEBEAT_JOURNAL`, `kind`:
 * `'symlink'`, `'not_writable'`, `'no_space'`, `'not_a_directory'`,
 * `'no_directory'`, `'invalid_record'`, `'corrupt'`, `'misplaced'`,
 * `'not_finished'`, `'io'`;
 * `path`, `quarantinedTo`). The native addon throws them; this class only
 * names them (and can be constructed for tests).
 */
class JournalError extends Error {
  constructor (kind, message, options) {
    super(message ?? `journal error: ${kind}`, options)
    this.name = 'JournalError'
    this.code = 'ERR_LEASEBEAT_JOURNAL'
    this.kind = kind
    this.path = options?.path ?? null
    this.quarantinedTo = options?.quarantinedTo ?? null
  }

  static [Symbol.hasInstance] (v) {
    return v instanceof Error && v.code === 'ERR_LEASEBEAT_JOURNAL'
  }
}

/**
 * The heartbeat failure(s) of a lease under policy `'cancel'` (the reason of
 * the lease's aborted `signal`) or `'fail_on_finalize'` (the rejection of
 * `commit`/`release` once the settlement has run: `settlement` is its result).
 */
class HeartbeatFailureError extends Error {
  constructor (failures, settlement = null) {
    const last = failures[failures.length - 1]
    super(`heartbeat of reservation ${last?.reservationId ?? '(none)'} failed: ${last?.disposition === 'stop' ? `stopped (${last.reason})` : last?.outcome}` +
      (failures.length > 1 ? ` (${failures.length} failures)` : ''))
    this.name = 'HeartbeatFailureError'
    this.code = 'ERR_LEASEBEAT_HEARTBEAT_FAILED'
    this.failures = failures
    this.reservationId = last?.reservationId ?? null
    this.settlement = settlement
  }
}

const DEFAULT_SETTLE_TIMEOUT_MS = 10000
const SETTLER_OPTIONS = ['baseUrl', 'apiKey', 'tenant', 'transport', 'journal', 'retry', 'requestTimeoutMs', 'replay', 'onDecision', 'onReplay', 'clock']

/** Performs one settlement attempt with its timeout; resolves to `{ response }` or `{ failure }`. */
async function performSettle (transport, request, timeoutMs, stopSignal) {
  const ac = new AbortController()
  const signal = AbortSignal.any([ac.signal, AbortSignal.timeout(timeoutMs), stopSignal])
  let timer = null
  const timedOut = new Promise((resolve) => {
    timer = setTimeout(() => { ac.abort(); resolve({ failure: 'timeout' }) }, timeoutMs)
    timer.unref()
  })
  let onStop = null
  const stopped = new Promise((resolve) => {
    onStop = () => resolve({ failure: 'reset', stopped: true })
    if (stopSignal.aborted) onStop()
    else stopSignal.addEventListener('abort', onStop, { once: true })
  })
  const sent = (async () => {
    try {
      const res = await transport(request, signal)
      if (res === null || typeof res !== 'object' || typeof res.status !== 'number') {
        process.emitWarning('leasebeat settlement: the transport resolved to something other than { status, headers, body }; counted as a reset', 'LeasebeatTransportWarning')
        return { failure: 'reset' }
      }
      const response = { status: res.status }
      if (res.headers !== undefined) response.headers = res.headers
      if (res.body !== undefined) response.body = res.body
      return { response }
    } catch (err) {
      return { failure: err instanceof TransportError ? err.kind : (signal.aborted ? 'timeout' : 'reset') }
    }
  })()
  try {
    return await Promise.race([sent, timedOut, stopped])
  } finally {
    clearTimeout(timer)
    stopSignal.removeEventListener('abort', onStop)
  }
}

/** The settlement result handed to callers (see runner.d.ts, `SettleResult`). */
function settleResult (s, decisions, written, journalError) {
  const last = s.lastDecision
  const outcome = s.outcome
  return {
    reservationId: s.reservationId,
    key: s.key,
    mode: s.mode,
    outcome,
    ok: outcome === 'committed' || outcome === 'applied' || outcome === 'released',
    code: last.code,
    status: last.status,
    // On disk is what was written and not removed by J-5: an abandoned
    // settlement (flush deadline) and a failed removal keep theirs; a
    // settlement whose every write failed (SP-3) has none.
    recordKept: written && !(outcome !== null && last.record !== null && last.record.type === 'remove' && journalError === null),
    decisions,
    lastDecision: last,
    journalError
  }
}

/**
 * Settles reservations through the core's `Settlement` (ST-1..ST-11) and the
 * durable `Journal` (J-1..J-8) of one server and principal: replays the
 * journal's partition on start (in the background: `replayed`), drives every
 * settlement it is given (persist before the first request, same-key
 * retries, `Retry-After` floors, the event fallback), and drains with a
 * bounded `flush`. See runner.d.ts.
 */
class Settler {
  #journal
  #transport
  #retry
  #timeoutMs
  #clock
  #onDecision
  #onReplay
  #inflight = new Set()
  #closed = new AbortController()

  constructor (options) {
    check(options !== null && typeof options === 'object', 'Settler: options must be an object')
    for (const k of Object.keys(options)) check(SETTLER_OPTIONS.includes(k), `Settler: unknown option ${JSON.stringify(k)} (allowed: ${SETTLER_OPTIONS.join(', ')})`)
    for (const k of ['transport', 'onDecision', 'onReplay', 'clock']) {
      check(options[k] === undefined || typeof options[k] === 'function', `Settler: options.${k} must be a function`)
    }
    const { baseUrl, apiKey } = options
    check(typeof baseUrl === 'string' && baseUrl.length > 0, 'Settler: options.baseUrl must be a non-empty string (the server the records settle against)')
    check(options.tenant === undefined || options.tenant === null || typeof options.tenant === 'string', 'Settler: options.tenant must be a string')
    check(options.replay === undefined || typeof options.replay === 'boolean', 'Settler: options.replay must be a boolean')
    const j = options.journal
    check(j === undefined || j === false || j instanceof Journal || (j !== null && typeof j === 'object'),
      'Settler: options.journal must be false, a Journal, or { dir?, tenant? }')
    if (options.transport === undefined) {
      check(typeof apiKey === 'string' && apiKey.length > 0, 'Settler: options.apiKey must be a non-empty string (or give options.transport)')
      this.#transport = fetchTransport({ baseUrl, apiKey })
    } else {
      this.#transport = options.transport
    }
    check(options.requestTimeoutMs === undefined || (Number.isInteger(options.requestTimeoutMs) && options.requestTimeoutMs > 0),
      'Settler: options.requestTimeoutMs must be a positive integer (ms)')
    this.#timeoutMs = options.requestTimeoutMs ?? DEFAULT_SETTLE_TIMEOUT_MS
    this.#retry = options.retry
    this.#clock = options.clock ?? (() => performance.now())
    this.#onDecision = options.onDecision
    this.#onReplay = options.onReplay
    this.baseUrl = baseUrl
    if (j === false) {
      this.#journal = null
    } else if (j instanceof Journal) {
      this.#journal = j
    } else {
      const jo = j ?? {}
      for (const k of Object.keys(jo)) check(k === 'dir' || k === 'tenant', `Settler: unknown option journal.${k} (allowed: dir, tenant)`)
      const tenant = jo.tenant ?? options.tenant
      check(typeof apiKey === 'string', 'Settler: options.apiKey is required for the journal (it names the partition when no tenant is given; it is never stored)')
      const open = { baseUrl, apiKey }
      if (jo.dir !== undefined) open.dir = jo.dir
      if (tenant !== undefined && tenant !== null) open.tenant = tenant
      this.#journal = Journal.open(open) // throws a JournalError
    }
    const replay = options.replay ?? true
    this.replayed = replay && this.#journal !== null
      ? this.#track(this.#replay())
      : Promise.resolve({ settled: [], busy: [], quarantined: [], migrated: [], skipped: [] })
    // Never an unhandled rejection: the caller may not look at `replayed`.
    this.replayed.catch(() => {})
  }

  /** The journal (`null` when opted out). */
  get journal () {
    return this.#journal
  }

  /** How many settlements are being driven now. */
  get pending () {
    return this.#inflight.size
  }

  #track (p) {
    this.#inflight.add(p)
    const untrack = () => this.#inflight.delete(p)
    p.then(untrack, untrack)
    return p
  }

  async #replay () {
    await null
    const opts = { now: this.#clock(), wallMs: Date.now() }
    if (this.#retry !== undefined) opts.retry = this.#retry
    let r
    try {
      r = this.#journal.replay(opts)
    } catch (err) {
      // Never silent: `replayed` rejects with it, and it is a process warning.
      process.emitWarning(`leasebeat journal: the replay on start failed: ${err?.message ?? err}`, 'LeasebeatJournalWarning')
      throw err
    }
    const rep = { settled: [], busy: r.busy, quarantined: r.quarantined, migrated: r.migrated, skipped: r.skipped }
    for (const q of r.quarantined) {
      // J-4: corruption is reported, never silent.
      if (this.#onReplay === undefined) process.emitWarning(`leasebeat journal: quarantined ${q.file} -> ${q.movedTo}: ${q.reason}`, 'LeasebeatJournalWarning')
    }
    rep.settled = await Promise.all(r.settlements.map((s) => this.#drive(s, {})))
    report(this.#onReplay, rep)
    return rep
  }

  async #drive (s, hooks) {
    try {
      return await this.#run(s, hooks)
    } catch (err) {
      // A refusal by the core (a bug) or a transport that threw synchronously:
      // the record stays on disk for the next replay, the claim is let go.
      if (this.#journal !== null) {
        try { this.#journal.releaseClaim(s.reservationId) } catch {}
      }
      throw err
    }
  }

  async #run (s, hooks) {
    const decisions = []
    // A record of it is on disk: one built from a record (SP-4: it persists
    // nothing until that record changes), or a write succeeded below.
    let written = this.#journal !== null && s.record !== null && s.pollAction().type !== 'persist'
    const clock = this.#clock
    const stop = this.#closed.signal
    const note = (d) => {
      decisions.push(d)
      report(this.#onDecision, { reservationId: s.reservationId, decision: d })
      if (hooks.onDecision !== undefined) report(hooks.onDecision, d)
      return d
    }
    for (;;) {
      if (stop.aborted) break
      const a = s.pollAction()
      if (a.type === 'done') break
      if (a.type === 'persist') {
        if (this.#journal === null) {
          note(s.handlePersisted(clock()))
        } else {
          const d = note(this.#journal.persist(s, clock()))
          if (!d.warnings.includes('persist_failed')) written = true
        }
        continue
      }
      if (a.type === 'wait') throw new Error('Settler: the settlement has an attempt in flight that this settler did not send')
      const att = a.attempt
      while (!stop.aborted) {
        const wait = att.dueMs - clock()
        if (wait <= 0) break
        await sleep(wait, stop)
      }
      if (stop.aborted) break
      note(s.handleSent(att.id, clock()))
      const request = { kind: att.endpoint, reservationId: s.reservationId, key: att.key, body: att.body, attempt: att }
      const out = await performSettle(this.#transport, request, this.#timeoutMs, stop)
      if (out.stopped || stop.aborted) break
      note(out.response !== undefined
        ? s.handleResponse(att.id, out.response, clock(), Date.now())
        : s.handleFailure(att.id, out.failure, clock()))
    }
    let journalError = null
    if (this.#journal !== null) {
      try {
        if (s.outcome !== null) this.#journal.finish(s)
        else this.#journal.releaseClaim(s.reservationId)
      } catch (err) {
        journalError = err
        process.emitWarning(`leasebeat journal: finishing ${JSON.stringify(s.reservationId)} failed: ${err?.message ?? err}`, 'LeasebeatJournalWarning')
      }
    }
    return settleResult(s, decisions, written, journalError)
  }

  /**
   * Drives `settlement` (new, or from a record) to its end through this
   * settler's journal and transport. Resolves to a `SettleResult`.
   */
  settle (settlement, hooks = {}) {
    check(settlement instanceof Settlement, 'Settler.settle: settlement must be a Settlement')
    check(!this.#closed.signal.aborted, 'Settler.settle: this settler is closed')
    return this.#track(this.#drive(settlement, hooks))
  }

  #build (options) {
    const o = { ...options, baseUrl: this.baseUrl }
    if (this.#retry !== undefined) o.retry = this.#retry
    return new Settlement(o, this.#clock(), Date.now())
  }

  /**
   * Commits `actual` on `reservationId` (journaled first): `extra` is
   * `{ metrics?, metadata?, subject?, action? }` (subject and action enable
   * the expired-commit event fallback).
   */
  commit (reservationId, actual, extra = {}) {
    check(extra !== null && typeof extra === 'object', 'commit: the options must be an object { metrics?, metadata?, subject?, action? }')
    for (const k of Object.keys(extra)) check(['metrics', 'metadata', 'subject', 'action', 'onDecision'].includes(k), `commit: unknown option ${JSON.stringify(k)}`)
    let body = null
    if (actual !== null && actual !== undefined) {
      body = { actual }
      if (extra.metrics !== undefined) body.metrics = extra.metrics
      if (extra.metadata !== undefined) body.metadata = extra.metadata
    }
    const event = extra.subject != null && extra.action != null ? { subject: extra.subject, action: extra.action } : null
    const s = this.#build({ reservationId, commit: body, event })
    return this.settle(s, { onDecision: extra.onDecision })
  }

  /** Releases `reservationId` (work that used nothing; not journaled). */
  release (reservationId, reason, hooks = {}) {
    const o = { reservationId, release: true }
    if (reason !== undefined && reason !== null) o.releaseReason = reason
    return this.settle(this.#build(o), hooks)
  }

  /**
   * Waits at most `timeoutMs` for every settlement in flight (the replay
   * included), and resolves to `{ pending }`: how many are still running
   * (their records stay on disk, J-7).
   */
  async flush (timeoutMs) {
    check(Number.isFinite(timeoutMs) && timeoutMs >= 0, 'flush: timeoutMs must be a non-negative number')
    let timer = null
    const timeout = new Promise((resolve) => { timer = setTimeout(resolve, timeoutMs) })
    try {
      await Promise.race([Promise.allSettled([...this.#inflight]), timeout])
    } finally {
      clearTimeout(timer)
    }
    return { pending: this.#inflight.size }
  }

  /**
   * Stops driving: settlements in flight stop where they are (their records
   * stay on disk for the next replay, their claims are released); later
   * calls throw. Call `flush` first to drain.
   */
  close () {
    this.#closed.abort()
  }
}

const LEASE_OPTIONS = ['transport', 'baseUrl', 'apiKey', 'signal', 'onDecision', 'onJeopardy', 'clock',
  'settler', 'journal', 'tenant', 'retry', 'policy', 'onHeartbeatFailure', 'onSettlementDecision', 'subject', 'action']
const POLICIES = ['warn', 'cancel', 'fail_on_finalize']

/**
 * Starts the heartbeat of one lease and returns its handle at once: the work
 * runs beside it and ends it with `commit(actual, { metrics, metadata })` or
 * `release(reason)`, settled through the `Settler` (journal first). See
 * runner.d.ts, `Lease`.
 */
function startLease (heartbeat, options) {
  const o = validate(heartbeat, options, 'startLease', LEASE_OPTIONS)
  const policy = o.policy ?? 'warn'
  check(POLICIES.includes(policy), `startLease: options.policy must be one of ${POLICIES.join(', ')}`)
  check(o.settler === undefined || o.settler instanceof Settler, 'startLease: options.settler must be a Settler')
  check(o.settler === undefined || (o.journal === undefined && o.tenant === undefined && o.retry === undefined),
    'startLease: options.journal/tenant/retry configure the default settler; do not combine them with options.settler')
  claimHeartbeat(heartbeat, 'startLease')
  const transport = o.transport ?? fetchTransport({ baseUrl: o.baseUrl, apiKey: o.apiKey })
  let settler = o.settler
  if (settler === undefined) {
    try {
      const so = { baseUrl: o.baseUrl ?? 'http://localhost', apiKey: o.apiKey, transport, journal: o.journal, tenant: o.tenant, retry: o.retry }
      for (const k of Object.keys(so)) if (so[k] === undefined) delete so[k]
      if (o.transport !== undefined && o.baseUrl === undefined && o.journal !== false) {
        throw new TypeError('startLease: with options.transport give options.settler, or options.baseUrl and options.apiKey for the journal partition, or journal: false')
      }
      settler = new Settler(so)
    } catch (err) {
      running.delete(heartbeat)
      throw err
    }
  }
  const work = new AbortController()
  const hbStop = new AbortController()
  const signals = [hbStop.signal]
  if (o.signal !== undefined) signals.push(o.signal)
  const failures = []
  let subject = o.subject ?? null
  let action = o.action ?? null
  let stoppedByUs = false
  let readyResolve, readyReject
  const ready = new Promise((resolve, reject) => { readyResolve = resolve; readyReject = reject })
  ready.catch(() => {})
  const onFailure = (event) => {
    failures.push(event)
    if (o.onHeartbeatFailure !== undefined) report(o.onHeartbeatFailure, event)
    else process.emitWarning(`leasebeat: heartbeat of reservation ${event.reservationId ?? '(none)'}: ${event.outcome}, ${event.disposition}${event.reason ? ` (${event.reason})` : ''}`, 'LeasebeatHeartbeatWarning')
    if (policy === 'cancel' && event.disposition === 'stop' && !work.signal.aborted) work.abort(new HeartbeatFailureError([...failures]))
  }
  const onDecision = (d) => {
    if (d.reservationId !== null) readyResolve(d.reservationId)
    report(o.onDecision, d)
    const ours = d.next === 'stop' && d.reason === 'cancelled' && (stoppedByUs || o.signal?.aborted)
    if (ours) return
    if (d.outcome !== 'success' || d.next === 'stop') {
      onFailure({
        event: 'heartbeat_failure',
        reservationId: d.reservationId ?? heartbeat.reservationId,
        disposition: d.next === 'stop' ? 'stop' : (d.key === 'same' ? 'retry_same_key' : 'retry_new_key'),
        reason: d.reason,
        outcome: d.outcome,
        policy,
        decision: d
      })
    }
  }
  const loopOptions = { ...o, signal: AbortSignal.any(signals), onDecision }
  const stopped = heartbeatLoop(heartbeat, loopOptions, transport, {
    onAttempt: (attempt) => {
      if (attempt.kind !== 'create' || (subject !== null && action !== null)) return
      const sa = subjectAction(attempt.body)
      subject ??= sa?.subject ?? null
      action ??= sa?.action ?? null
    }
  })
  stopped.then((d) => {
    readyReject(new HeartbeatFailureError(failures.length > 0 ? [...failures] : [{ event: 'heartbeat_failure', reservationId: null, disposition: 'stop', reason: d.reason, outcome: d.outcome, policy, decision: d }]))
  }, (err) => readyReject(err))
  stopped.catch(() => {})
  const stopHeartbeat = () => {
    stoppedByUs = true
    hbStop.abort()
  }
  let settling = null
  const end = async (build) => {
    if (settling !== null) throw new Error('startLease: this lease is already being settled')
    settling = true
    let result
    try {
      let id = heartbeat.reservationId
      if (id === null) id = await ready
      result = await build(id, (d) => {
        if (o.onSettlementDecision !== undefined) report(o.onSettlementDecision, d)
        if (d.stopHeartbeat) stopHeartbeat()
      })
    } catch (err) {
      settling = null // nothing was settled (bad arguments, no reservation): the caller may try again
      throw err
    }
    // ST-11: the heartbeat ends with the settlement's final outcome; with no
    // actual (ST-10) nothing was sent and the lease is still held: release it.
    if (result.outcome === 'no_actual') settling = null
    else stopHeartbeat()
    if (policy === 'fail_on_finalize' && failures.length > 0) throw new HeartbeatFailureError([...failures], result)
    return result
  }
  return {
    signal: work.signal,
    ready,
    stopped,
    settler,
    policy,
    get reservationId () { return heartbeat.reservationId },
    get heartbeatFailures () { return [...failures] },
    async commit (actual, extra = {}) {
      check(extra !== null && typeof extra === 'object', 'commit: the options must be an object { metrics?, metadata?, subject?, action? }')
      for (const k of Object.keys(extra)) check(['metrics', 'metadata', 'subject', 'action'].includes(k), `commit: unknown option ${JSON.stringify(k)} (allowed: metrics, metadata, subject, action)`)
      return end((id, onDecision) => settler.commit(id, actual, {
        metrics: extra.metrics,
        metadata: extra.metadata,
        subject: extra.subject ?? subject,
        action: extra.action ?? action,
        onDecision
      }))
    },
    async release (reason) {
      check(reason === undefined || reason === null || typeof reason === 'string', 'release: reason must be a string')
      return end((id, onDecision) => settler.release(id, reason, { onDecision }))
    },
    stop () {
      stopHeartbeat()
      return stopped
    }
  }
}

module.exports = {
  runHeartbeat,
  startLease,
  Settler,
  JournalError,
  HeartbeatFailureError,
  fetchTransport,
  TransportError,
  PROVEN_FOREVER_NS,
  MAX_BODY_BYTES,
  timerSlack
}
