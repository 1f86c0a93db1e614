// Replay of the settlement vectors (tests/vectors/settlement/*.json, format in
// the project's settlement contract, "Vectors", and docs/settlement-vectors.md)
// through the public JavaScript API of the installed `leasebeat` package
// (`Settlement`). It does what the Rust replay (core/src/scenario/settlement.rs)
// does, including its own rule checks on every step: every request carries the
// settlement's first key in header and body (ST-1, across restarts too), no
// request goes before its due time, before the acknowledged record's
// not_before_ms on the wall clock (ST-4), or while a persist is unacknowledged
// (SP-3), and at most one terminal success per scenario.
//
// Vectors are parsed with lossless-json: integers beyond 2^53 stay exact, and
// bodies are passed to the binding as their JSON text with number literals
// unchanged.

import { Settlement } from 'leasebeat'
import { parse, stringify, isLosslessNumber } from 'lossless-json'

import { FormatError, Mismatch, msToNs } from './replay.mjs'

export { FormatError, Mismatch }

const STEP_FIELDS = ['at', 'wall', 'start', 'persisted', 'persist_failed', 'send', 'recv', 'fail', 'restart', 'record', 'expect']
const CONFIG_FIELDS = ['reservation_id', 'base_url', 'commit', 'event', 'release', 'release_reason', 'retry']
const EXPECT_FIELDS = ['next', 'at', 'key', 'attempt', 'mode', 'record', 'outcome', 'code', 'class', 'status', 'delay_ms', 'not_before_ms', 'warnings', 'heartbeat', 'body', 'error']
const SUCCESSES = ['committed', 'applied', 'released']

function onlyKeys (o, what, allowed) {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) throw new FormatError(`${what} has an unknown field ${JSON.stringify(k)}`)
  }
}

function isObject (v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && !isLosslessNumber(v)
}

function uint (v, what) {
  if (!isLosslessNumber(v) || !/^(0|[1-9][0-9]*)$/.test(v.value)) throw new FormatError(`${what} must be a non-negative integer`)
  return BigInt(v.value)
}

/** A body given in a file: an object (its exact JSON text) or a string of raw text. */
function givenText (v, what) {
  if (isObject(v)) return stringify(v)
  if (typeof v === 'string') return v
  throw new FormatError(`${what} is an object or a string of raw text`)
}

/** Values for comparison: numbers of every kind as their decimal text. */
function norm (v) {
  if (isLosslessNumber(v)) return v.value
  if (typeof v === 'number' || typeof v === 'bigint') return String(v)
  if (Array.isArray(v)) return v.map(norm)
  if (v !== null && typeof v === 'object') {
    const out = {}
    for (const k of Object.keys(v).sort()) out[k] = norm(v[k])
    return out
  }
  return v
}

function same (a, b) {
  return JSON.stringify(norm(a)) === JSON.stringify(norm(b))
}

/** Parses one settlement scenario file's text. */
export function parseSettleScenario (text) {
  let v
  try {
    v = parse(text)
  } catch (e) {
    throw new FormatError(`invalid JSON: ${e.message}`)
  }
  if (!isObject(v)) throw new FormatError('a scenario is a JSON object')
  onlyKeys(v, 'scenario', ['id', 'about', 'config', 'steps'])
  if (typeof v.id !== 'string') throw new FormatError('missing string "id"')
  const cfg = v.config
  if (!isObject(cfg)) throw new FormatError('missing object "config"')
  onlyKeys(cfg, 'config', CONFIG_FIELDS)
  if (typeof cfg.reservation_id !== 'string') throw new FormatError('config.reservation_id must be a string')
  const release = cfg.release === true
  const options = {
    reservationId: cfg.reservation_id,
    keyPrefix: 'key-',
    release
  }
  if (cfg.base_url !== undefined) options.baseUrl = cfg.base_url
  if (!release) options.commit = cfg.commit == null ? null : givenText(cfg.commit, 'config.commit')
  if (cfg.event != null) options.event = givenText(cfg.event, 'config.event')
  if (cfg.release_reason != null) options.releaseReason = cfg.release_reason
  let retry
  if (cfg.retry !== undefined) {
    if (!isObject(cfg.retry)) throw new FormatError('config.retry must be an object')
    onlyKeys(cfg.retry, 'config.retry', ['max_attempts', 'initial_ms', 'max_ms'])
    retry = {}
    if (cfg.retry.max_attempts !== undefined) retry.maxAttempts = uint(cfg.retry.max_attempts, 'config.retry.max_attempts')
    if (cfg.retry.initial_ms !== undefined) retry.initialMs = uint(cfg.retry.initial_ms, 'config.retry.initial_ms')
    if (cfg.retry.max_ms !== undefined) retry.maxMs = uint(cfg.retry.max_ms, 'config.retry.max_ms')
    options.retry = retry
  }
  if (!Array.isArray(v.steps)) throw new FormatError('missing array "steps"')
  const steps = v.steps.map((s, i) => {
    try {
      const step = parseStep(s)
      const first = step.event.type === 'start' || step.event.type === 'restart'
      if (i === 0 && !first) throw new FormatError('the first step is a start or a restart')
      if (i > 0 && step.event.type === 'start') throw new FormatError('start is only allowed as the first step')
      if (step.event.type === 'start' && (step.event.kind === 'release') !== release) throw new FormatError('start does not match config.release')
      return step
    } catch (e) {
      throw new FormatError(`step ${i}: ${e.message}`)
    }
  })
  return { id: v.id, about: v.about ?? '', options, retry, steps }
}

function parseStep (s) {
  if (!isObject(s)) throw new FormatError('a step is a JSON object')
  onlyKeys(s, 'step', STEP_FIELDS)
  const atNs = msToNs(s.at, 'at')
  const wallMs = s.wall === undefined ? null : uint(s.wall, 'wall')
  const events = []
  if ('start' in s) {
    if (s.start !== 'commit' && s.start !== 'release') throw new FormatError('start must be commit or release')
    events.push({ type: 'start', kind: s.start })
  }
  if ('persisted' in s) {
    if (s.persisted !== true) throw new FormatError('persisted must be true')
    events.push({ type: 'persisted' })
  }
  if ('persist_failed' in s) {
    if (typeof s.persist_failed !== 'string') throw new FormatError('persist_failed must be a message string')
    events.push({ type: 'persist_failed', message: s.persist_failed })
  }
  if ('send' in s) {
    if (!['commit', 'event', 'release'].includes(s.send)) throw new FormatError('send must be commit, event or release')
    events.push({ type: 'send', endpoint: s.send })
  }
  if ('recv' in s) events.push({ type: 'recv', response: parseRecv(s.recv) })
  if ('fail' in s) {
    if (!['timeout', 'connect', 'reset'].includes(s.fail)) throw new FormatError('fail must be timeout, connect or reset')
    events.push({ type: 'fail', failure: s.fail })
  }
  if ('restart' in s) {
    if (s.restart !== true) throw new FormatError('restart must be true')
    if (wallMs === null) throw new FormatError('a restart step gives the wall clock ("wall")')
    events.push({ type: 'restart', verbatim: 'record' in s ? givenText(s.record, 'record') : null })
  } else if ('record' in s) {
    throw new FormatError('record is only allowed in a restart step')
  }
  if (events.length !== 1) throw new FormatError('a step has exactly one of start, persisted, persist_failed, send, recv, fail, restart')
  let expect = null
  if ('expect' in s) {
    if (!isObject(s.expect)) throw new FormatError('expect must be an object')
    onlyKeys(s.expect, 'expect', EXPECT_FIELDS)
    expect = s.expect
  }
  return { atNs, wallMs, event: events[0], expect }
}

function parseRecv (r) {
  if (!isObject(r)) throw new FormatError('recv must be an object')
  onlyKeys(r, 'recv', ['status', 'headers', 'body', 'raw', 'timing'])
  const response = { status: Number(uint(r.status, 'recv.status')) }
  if (r.headers !== undefined) {
    if (!isObject(r.headers)) throw new FormatError('recv.headers must be an object')
    response.headers = r.headers
  }
  if ('body' in r && 'raw' in r) throw new FormatError('recv has both body and raw')
  if ('body' in r) response.body = stringify(r.body)
  if ('raw' in r) {
    if (typeof r.raw !== 'string') throw new FormatError('recv.raw must be a string')
    response.body = r.raw
  }
  if ('timing' in r) response.timingUnknown = true
  return response
}

/** `ERR_LEASEBEAT_INVALID_CONFIG` -> `invalid_config` (the core's code). */
function coreCode (e) {
  if (typeof e?.code !== 'string' || !e.code.startsWith('ERR_LEASEBEAT_')) throw e
  return e.code.slice('ERR_LEASEBEAT_'.length).toLowerCase()
}

/**
 * Replays a scenario; returns the emitted decisions (one per step that is not
 * a refusal... and one per refusal, as the Rust replay emits), or throws a
 * Mismatch at the first difference.
 */
export function replaySettlement (scenario) {
  const w = { s: null, store: null, writing: null, keys: [], successes: 0, wallOffset: 1785585600000n }
  const emitted = []
  try {
    scenario.steps.forEach((step, i) => {
      const atMs = step.atNs / 1_000_000n
      if (step.wallMs !== null) w.wallOffset = step.wallMs - atMs
      let wallMs = w.wallOffset + atMs
      if (wallMs < 0n) wallMs = 0n
      let decision = null
      let error = null
      try {
        decision = apply(scenario, w, i, step.event, step.atNs, wallMs)
      } catch (e) {
        if (e instanceof Mismatch) throw e
        error = { error: coreCode(e), detail: e.message }
        if (step.event.type === 'restart') Object.assign(error, { next: 'done', record: 'quarantine' })
      }
      const line = decision !== null ? emit(w, decision) : error
      if (decision !== null) after(w, i, decision)
      emitted.push(line)
      if (step.expect !== null) compare(i, step.expect, decision, line, w)
      else if (decision === null) throw new Mismatch(i, 'error', 'no error', `${error.error}: ${error.detail}`)
    })
  } finally {
    w.s?.close()
  }
  return emitted
}

function live (w, i) {
  if (w.s === null) throw new Mismatch(i, 'settlement', 'a settlement', 'none (refused or never built)')
  return w.s
}

function apply (scenario, w, i, event, atNs, wallMs) {
  switch (event.type) {
    case 'start': {
      const s = new Settlement(scenario.options, atNs, wallMs)
      w.s = s
      const d = s.lastDecision
      w.writing = d.next === 'persist' ? s.record : null
      return d
    }
    case 'restart': {
      w.s?.close()
      w.s = null
      w.writing = null
      let text = event.verbatim
      if (text === null) {
        if (w.store === null) throw new Mismatch(i, 'restart', 'an acknowledged record to replay', 'none')
        text = w.store.json
      }
      // Every other record form goes in as bytes, this one as a string.
      const record = i % 2 === 0 ? text : Buffer.from(text, 'utf8')
      const opts = scenario.retry === undefined ? undefined : { retry: scenario.retry }
      const s = Settlement.fromRecord(record, atNs, wallMs, opts)
      w.s = s
      w.store = s.record
      return s.lastDecision
    }
    case 'persisted': {
      const d = live(w, i).handlePersisted(atNs)
      w.store = w.writing
      w.writing = null
      return d
    }
    case 'persist_failed': {
      const d = live(w, i).handlePersistFailed(event.message, atNs)
      w.writing = null
      return d
    }
    case 'send': {
      const s = live(w, i)
      const action = s.pollAction()
      if (action.type !== 'send') throw new Mismatch(i, 'send', `send ${event.endpoint}`, action.type)
      const a = action.attempt
      if (a.endpoint !== event.endpoint) throw new Mismatch(i, 'send', event.endpoint, a.endpoint)
      if (atNs < a.dueNs) throw new Mismatch(i, 'send', `no send before its due time ${a.dueNs} ns`, `sent at ${atNs} ns`)
      const floor = w.store?.notBeforeMs
      if (floor != null && event.endpoint !== 'release' && wallMs < BigInt(floor)) {
        throw new Mismatch(i, 'send', `no send before not_before_ms ${floor}`, `wall ${wallMs}`)
      }
      if (w.writing !== null) throw new Mismatch(i, 'send', 'no send while a persist is unacknowledged', 'a send')
      const bodyKey = parse(a.bodyText)?.idempotency_key
      if (bodyKey !== a.key) throw new Mismatch(i, 'key', "the body's key = the header key", bodyKey)
      if (w.keys.length > 0 && w.keys[0] !== a.key) throw new Mismatch(i, 'key', `${w.keys[0]} (ST-1)`, a.key)
      if (w.keys.length === 0) w.keys.push(a.key)
      return s.handleSent(a.id, atNs)
    }
    case 'recv': {
      const s = live(w, i)
      return s.handleResponse(inFlight(s, i), event.response, atNs, wallMs)
    }
    case 'fail': {
      const s = live(w, i)
      return s.handleFailure(inFlight(s, i), event.failure, atNs)
    }
  }
  throw new Error(`unknown event ${event.type}`)
}

function inFlight (s, i) {
  const action = s.pollAction()
  if (action.type !== 'wait') throw new Mismatch(i, 'outcome', 'an attempt in flight', action.type)
  return action.attempt.id
}

/** The decision in the vectors' vocabulary, from the JavaScript object alone. */
function emit (w, d) {
  const out = { class: d.class, mode: d.mode, next: d.next }
  if (d.atNs !== null) out.at_ns = d.atNs
  if (d.attempt !== null) out.attempt = d.attempt
  if (d.code !== null) out.code = d.code
  if (d.delayMs !== null) out.delay_ms = d.delayMs
  if (d.detail !== null) out.detail = d.detail
  if (d.stopHeartbeat) out.heartbeat = 'stop'
  if (['commit', 'event', 'release', 'wait'].includes(d.next)) {
    // The key's ordinal among the keys of the scenario (ST-1: always 1).
    const key = w.s.key
    if (!w.keys.includes(key)) w.keys.push(key)
    out.key = w.keys.indexOf(key) + 1
  }
  if (d.notBeforeMs !== null) out.not_before_ms = d.notBeforeMs
  if (d.outcome !== null) out.outcome = d.outcome
  if (d.record !== null) {
    out.record = d.record.type === 'write' ? { mode: d.record.mode, not_before_ms: d.record.notBeforeMs } : d.record.type
  }
  if (d.status !== null) out.status = d.status
  if (d.warnings.length > 0) out.warnings = d.warnings
  return out
}

function after (w, i, d) {
  if (d.next === 'persist') w.writing = w.s.record
  if (d.record?.type === 'remove') w.store = null
  if (d.outcome !== null && SUCCESSES.includes(d.outcome)) {
    w.successes += 1
    if (w.successes > 1) throw new Mismatch(i, 'outcome', 'at most one terminal success', 'a second')
  }
}

function compare (i, expect, decision, line, w) {
  if (decision === null && !('error' in expect)) throw new Mismatch(i, 'error', 'no error', `${line.error}: ${line.detail}`)
  for (const [field, want] of Object.entries(expect)) {
    switch (field) {
      case 'at': {
        const got = line.at_ns ?? null
        if (got === null || got !== msToNs(want, 'expect.at')) throw new Mismatch(i, 'at', want.value, got)
        break
      }
      case 'record': {
        const got = line.record
        if (isObject(want) && isObject(got)) {
          // A subset of the whole record being written.
          const full = parse(w.s.record.json)
          for (const [k, v] of Object.entries(want)) {
            if (!same(full[k] ?? null, v)) throw new Mismatch(i, `record.${k}`, norm(v), norm(full[k]))
          }
        } else if (!same(got ?? null, want)) {
          throw new Mismatch(i, 'record', norm(want), norm(got))
        }
        break
      }
      case 'body': {
        const a = decision !== null && ['commit', 'event', 'release', 'wait'].includes(decision.next) ? w.s.attempt : null
        const got = a === null ? null : parse(a.bodyText)
        if (!same(got, want)) throw new Mismatch(i, 'body', norm(want), norm(got))
        break
      }
      case 'warnings': {
        const got = line.warnings ?? []
        if (!same(got, want)) throw new Mismatch(i, 'warnings', want, got)
        break
      }
      default: {
        const got = line[field] ?? null
        if (!same(got, want)) throw new Mismatch(i, field, norm(want), norm(got))
      }
    }
  }
}
