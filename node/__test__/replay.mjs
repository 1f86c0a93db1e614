// Replay of the shared scenario vectors (tests/vectors/*.json, format in the
// project's heartbeat contract) through the public JavaScript API of the
// installed `leasebeat` package. It does what the Rust replay
// (core/src/scenario.rs) does, including the harness's own key check:
// "new" = a key never used before on this lease, "same" = exactly the previous
// attempt's key with a byte-identical body.
//
// Vectors are parsed with lossless-json, so integers above 2^53 (in config,
// in expect, inside raw strings) are read exactly, and `body` objects are
// re-serialized with their number literals unchanged (`60000.0` stays a
// non-integer, as P-1 requires).

import { Heartbeat } from 'leasebeat'
import { parse, stringify, isLosslessNumber } from 'lossless-json'

const STEP_FIELDS = ['at', 'send', 'recv', 'fail', 'cancel', 'adopt', 'expect']
const ADOPT_FIELDS = ['key', 'sent', 'request', 'recv', 'fail']
const RECV_FIELDS = ['status', 'headers', 'body', 'raw', 'timing']
const EXPECT_FIELDS = ['id', 'step', 'next', 'at', 'key', 'key_index', 'reason', 'mode', 'numbers', 'warnings', 'proven_until', 'expires_at_ms', 'remaining_ttl_ms']

/** A problem with the vector file itself. */
export class FormatError extends Error {}

/** A difference between an expectation and what the binding decided. */
export class Mismatch extends Error {
  constructor (step, field, expected, got) {
    super(`step ${step}: ${field}: expected ${fmt(expected)}, got ${fmt(got)}`)
    Object.assign(this, { step, field, expected, got })
  }
}

function fmt (v) {
  if (typeof v === 'bigint') return `${v}`
  if (v === Infinity) return '"inf"'
  if (v === -Infinity) return '"-inf"'
  if (v === undefined) return 'absent'
  return JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? `${x}n` : isLosslessNumber(x) ? x.value : x))
}

function onlyKeys (o, what, allowed) {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) throw new FormatError(`${what} has an unknown field ${JSON.stringify(k)}`)
  }
}

function numText (v, what) {
  if (!isLosslessNumber(v)) throw new FormatError(`${what} must be a number, got ${fmt(v)}`)
  return v.value
}

/** An exact integer literal as a bigint. */
function integer (v, what) {
  const s = numText(v, what)
  if (!/^-?(0|[1-9][0-9]*)$/.test(s)) throw new FormatError(`${what} must be an integer literal, got ${s}`)
  return BigInt(s)
}

/**
 * Scenario milliseconds to nanoseconds: round(ms x 1000) x 1000, done on the
 * decimal text so that no precision is lost.
 */
export function msToNs (v, what = 'time') {
  const s = numText(v, what)
  const m = /^([0-9]+)(?:\.([0-9]+))?$/.exec(s)
  if (m === null) {
    const f = Number(s)
    if (!Number.isFinite(f) || f < 0) throw new FormatError(`${what} must be a non-negative number of ms, got ${s}`)
    return BigInt(Math.round(f * 1000)) * 1000n
  }
  const whole = BigInt(m[1])
  const frac = m[2] ?? ''
  let micros = BigInt((frac + '000').slice(0, 3))
  if (frac.length > 3 && frac[3] >= '5') micros += 1n
  return whole * 1_000_000n + micros * 1000n
}

/** An expected number: an integer literal, "inf" or "-inf". */
function expectedNum (v, what) {
  if (v === 'inf') return Infinity
  if (v === '-inf') return -Infinity
  return integer(v, what)
}

/** Parses one scenario file's text. */
export function parseScenario (text) {
  let v
  try {
    v = parse(text)
  } catch (e) {
    throw new FormatError(`invalid JSON: ${e.message}`)
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new FormatError('a scenario is a JSON object')
  onlyKeys(v, 'scenario', ['id', 'about', 'config', 'steps'])
  if (typeof v.id !== 'string') throw new FormatError('missing string "id"')
  const cfg = v.config
  if (cfg === null || typeof cfg !== 'object') throw new FormatError('missing object "config"')
  onlyKeys(cfg, 'config', ['ttl_ms', 'request_timeout_ms'])
  const config = {
    ttlMs: cfg.ttl_ms == null ? 60000n : integer(cfg.ttl_ms, 'config.ttl_ms'),
    requestTimeoutMs: cfg.request_timeout_ms == null ? null : integer(cfg.request_timeout_ms, 'config.request_timeout_ms')
  }
  if (!Array.isArray(v.steps)) throw new FormatError('missing array "steps"')
  const steps = v.steps.map((s, i) => {
    try {
      const step = parseStep(s)
      if (step.event.type === 'adopt' && i !== 0) throw new FormatError('adopt is only allowed as the first step')
      return step
    } catch (e) {
      throw new FormatError(`step ${i}: ${e.message}`)
    }
  })
  return { id: v.id, about: v.about ?? '', config, steps }
}

function parseStep (s) {
  if (s === null || typeof s !== 'object') throw new FormatError('a step is a JSON object')
  onlyKeys(s, 'step', STEP_FIELDS)
  const atNs = msToNs(s.at, 'at')
  const events = []
  if ('send' in s) {
    if (s.send !== 'create' && s.send !== 'extend') throw new FormatError(`send must be "create" or "extend", got ${fmt(s.send)}`)
    events.push({ type: 'send', kind: s.send })
  }
  if ('recv' in s) events.push({ type: 'recv', response: parseRecv(s.recv) })
  if ('fail' in s) events.push({ type: 'fail', failure: parseFail(s.fail, 'fail') })
  if ('cancel' in s) {
    if (s.cancel !== true) throw new FormatError('cancel must be true')
    events.push({ type: 'cancel' })
  }
  if ('adopt' in s) events.push({ type: 'adopt', adopt: parseAdopt(s.adopt) })
  if (events.length !== 1) throw new FormatError('a step has exactly one of send, recv, fail, cancel, adopt')
  const event = events[0]
  let expect = null
  if ('expect' in s) {
    if (s.expect === null || typeof s.expect !== 'object' || Array.isArray(s.expect)) throw new FormatError('expect must be an object')
    if (event.type === 'send') throw new FormatError('a send step has no expect')
    onlyKeys(s.expect, 'expect', EXPECT_FIELDS)
    expect = s.expect
  }
  return { atNs, event, expect }
}

function parseFail (f, what) {
  if (!['timeout', 'connect', 'reset'].includes(f)) throw new FormatError(`${what} must be timeout, connect or reset, got ${fmt(f)}`)
  return f
}

/** An adopted create: the create the caller performed itself. */
function parseAdopt (a) {
  if (a === null || typeof a !== 'object' || Array.isArray(a)) throw new FormatError('adopt must be an object')
  onlyKeys(a, 'adopt', ADOPT_FIELDS)
  if (typeof a.key !== 'string') throw new FormatError('adopt.key must be a string')
  const out = { key: a.key, sentNs: 'sent' in a ? msToNs(a.sent, 'adopt.sent') : null, requestBody: null }
  if ('request' in a) {
    if (a.request === null || typeof a.request !== 'object' || Array.isArray(a.request)) throw new FormatError('adopt.request must be an object')
    // The exact bytes the caller sent: the JSON text, number literals unchanged.
    out.requestBody = Buffer.from(stringify(a.request), 'utf8')
  }
  if (('recv' in a) === ('fail' in a)) throw new FormatError('adopt has exactly one of recv, fail')
  if ('recv' in a) out.response = parseRecv(a.recv)
  else out.failure = parseFail(a.fail, 'adopt.fail')
  return out
}

function parseRecv (r) {
  if (r === null || typeof r !== 'object') throw new FormatError('recv must be an object')
  onlyKeys(r, 'recv', RECV_FIELDS)
  const status = Number(integer(r.status, 'recv.status'))
  const response = { status }
  if (r.headers !== undefined) {
    if (r.headers === null || typeof r.headers !== 'object' || Array.isArray(r.headers)) throw new FormatError('recv.headers must be an object')
    response.headers = r.headers
  }
  if ('body' in r && 'raw' in r) throw new FormatError('recv has both body and raw')
  // The JSON text of a body object, number literals unchanged.
  if ('body' in r) response.body = stringify(r.body)
  if ('raw' in r) {
    if (typeof r.raw !== 'string') throw new FormatError('recv.raw must be a string')
    response.body = r.raw
  }
  if ('timing' in r) {
    if (r.timing !== 'unknown') throw new FormatError(`recv.timing must be "unknown", got ${fmt(r.timing)}`)
    response.timingUnknown = true
  }
  return response
}

const CAMEL = {
  rtt: 'rtt',
  max_rtt: 'maxRtt',
  lead_floor: 'leadFloor',
  attempt_budget: 'attemptBudget',
  safety_margin: 'safetyMargin',
  retry_reserve: 'retryReserve',
  next_delay: 'nextDelay',
  lead: 'lead',
  retry_window: 'retryWindow',
  retry_delay: 'retryDelay',
  lead_min: 'leadMin',
  grant: 'grant',
  cadence: 'cadence',
  skips: 'skips'
}

/** A number the binding returned, normalized for comparison. */
function gotNum (v) {
  if (typeof v === 'number' && Number.isFinite(v)) {
    if (!Number.isSafeInteger(v)) throw new Error(`the binding returned a non-safe-integer number ${v}`)
    return BigInt(v)
  }
  return v
}

function outstandingId (hb, step) {
  const a = hb.pollAction()
  if (a.type === 'await') return a.attempt.id
  if (a.type === 'send') throw new Mismatch(step, 'outcome', 'an attempt in flight', `attempt ${a.attempt.id} not yet sent`)
  throw new Mismatch(step, 'outcome', 'an attempt in flight', `stopped (${a.reason})`)
}

function compare (scenario, i, expect, d) {
  for (const [field, want] of Object.entries(expect)) {
    switch (field) {
      case 'id':
        if (want !== scenario.id) throw new Mismatch(i, 'id', want, scenario.id)
        break
      case 'step':
        if (integer(want, 'expect.step') !== BigInt(i)) throw new Mismatch(i, 'step', want, i)
        break
      case 'at': {
        if (d.next === 'stop') throw new Mismatch(i, 'at', want, 'absent (a stop)')
        if (want === 'inf') {
          if (d.at !== Infinity || d.atNs !== null) throw new Mismatch(i, 'at', want, d.atNs)
        } else {
          const wantNs = msToNs(want, 'expect.at')
          if (d.atNs !== wantNs) throw new Mismatch(i, 'at', `${wantNs} ns`, d.at === Infinity ? Infinity : `${d.atNs} ns`)
        }
        break
      }
      case 'key_index':
        if (want === null ? d.keyIndex !== null : BigInt(d.keyIndex ?? -1) !== integer(want, 'expect.key_index')) {
          throw new Mismatch(i, 'key_index', want, d.keyIndex)
        }
        break
      case 'numbers':
        for (const [name, v] of Object.entries(want)) {
          const camel = CAMEL[name]
          if (camel === undefined) throw new FormatError(`expect.numbers has an unknown number ${JSON.stringify(name)}`)
          const w = expectedNum(v, `expect.numbers.${name}`)
          if (!(camel in d.numbers)) throw new Mismatch(i, `numbers.${name}`, w, undefined)
          const g = gotNum(d.numbers[camel])
          if (g !== w) throw new Mismatch(i, `numbers.${name}`, w, g)
        }
        break
      case 'warnings': {
        const got = d.warnings
        if (!Array.isArray(want) || want.length !== got.length || want.some((w, k) => w !== got[k])) {
          throw new Mismatch(i, 'warnings', want, got)
        }
        break
      }
      case 'proven_until': {
        if (want === 'inf') {
          if (d.provenUntil !== Infinity || d.provenUntilNs !== 2n ** 64n - 1n) throw new Mismatch(i, 'proven_until', want, d.provenUntilNs)
        } else {
          const wantNs = msToNs(want, 'expect.proven_until')
          if (d.provenUntilNs !== wantNs) throw new Mismatch(i, 'proven_until', `${wantNs} ns`, d.provenUntilNs === null ? undefined : `${d.provenUntilNs} ns`)
        }
        break
      }
      case 'expires_at_ms':
      case 'remaining_ttl_ms': {
        const camel = field === 'expires_at_ms' ? 'expiresAtMs' : 'remainingTtlMs'
        const w = integer(want, `expect.${field}`)
        const g = d[camel] === null ? undefined : gotNum(d[camel])
        if (g !== w) throw new Mismatch(i, field, w, g)
        break
      }
      case 'next':
      case 'key':
      case 'reason':
      case 'mode': {
        const got = d[field] ?? null
        if (got !== want) throw new Mismatch(i, field, want, got ?? undefined)
        break
      }
      default:
        throw new FormatError(`expect has an unknown field ${field}`)
    }
  }
}

/**
 * The create body the core builds when an adopted create gives none: the
 * vectors' configs have no create_request, so it is the key and ttl_ms,
 * members in lexicographic order (serde_json's map order).
 */
function defaultCreateBody (config, key) {
  return Buffer.from(`{"idempotency_key":${JSON.stringify(key)},"ttl_ms":${config.ttlMs}}`, 'utf8')
}

/**
 * Replays a parsed scenario with deterministic keys ("key-1", "key-2", ...)
 * and checks every expectation; throws a Mismatch at the first difference.
 * Returns the decisions.
 */
export function replay (scenario) {
  let hb
  let adopted = null // the first decision of an adopted create
  const usedKeys = new Set()
  let current = null // { key, body } of the attempt sent last
  const first = scenario.steps[0]
  if (first !== undefined && first.event.type === 'adopt') {
    const a = first.event.adopt
    const create = { key: a.key, sentAt: a.sentNs, receivedAt: first.atNs, requestBody: a.requestBody }
    if (a.response !== undefined) create.response = a.response
    else create.failure = a.failure
    try {
      ;({ heartbeat: hb, decision: adopted } = Heartbeat.adoptCreate({ ...scenario.config, keyPrefix: 'key-' }, create))
    } catch (e) {
      throw new Mismatch(0, 'adopt', 'accepted', `${e.code}: ${e.message}`)
    }
    usedKeys.add(a.key)
    current = { key: a.key, body: a.requestBody ?? defaultCreateBody(scenario.config, a.key) }
  } else {
    try {
      hb = new Heartbeat({ ...scenario.config, keyPrefix: 'key-' })
    } catch (e) {
      throw new Mismatch(0, 'config', 'a valid configuration', `${e.code}: ${e.message}`)
    }
  }
  const decisions = []
  try {
    scenario.steps.forEach((step, i) => {
      const ev = step.event
      const accepted = (what, f) => {
        try {
          return f()
        } catch (e) {
          if (e instanceof Mismatch) throw e
          throw new Mismatch(i, what, 'accepted', `${e.code}: ${e.message}`)
        }
      }
      let d
      switch (ev.type) {
        case 'adopt':
          d = adopted
          break
        case 'send': {
          const a = hb.pollAction()
          if (a.type === 'await') throw new Mismatch(i, 'send', `send ${ev.kind}`, `attempt ${a.attempt.id} still in flight`)
          if (a.type === 'stop') throw new Mismatch(i, 'send', `send ${ev.kind}`, `stopped (${a.reason})`)
          if (a.attempt.kind !== ev.kind) throw new Mismatch(i, 'send', ev.kind, a.attempt.kind)
          accepted('send', () => hb.handleSent(a.attempt.id, step.atNs))
          current = { key: a.attempt.key, body: a.attempt.body }
          usedKeys.add(a.attempt.key)
          return
        }
        case 'recv': {
          const id = outstandingId(hb, i)
          d = accepted('recv', () => hb.handleResponse(id, ev.response, step.atNs))
          break
        }
        case 'fail': {
          const id = outstandingId(hb, i)
          d = accepted('fail', () => hb.handleFailure(id, ev.failure, step.atNs))
          break
        }
        case 'cancel':
          d = accepted('cancel', () => hb.cancel(step.atNs))
          break
      }
      // The harness's own check of S-4: what the key claim means in bytes.
      const attempt = hb.attempt
      if (attempt !== null && d.key !== null) {
        const ok = d.key === 'new'
          ? !usedKeys.has(attempt.key)
          : current !== null && current.key === attempt.key && Buffer.compare(current.body, attempt.body) === 0
        if (!ok) throw new Mismatch(i, 'key', `${d.key} key really ${d.key}`, attempt.key)
      }
      decisions.push(d)
      if (step.expect !== null) compare(scenario, i, step.expect, d)
    })
  } finally {
    hb.close()
  }
  return decisions
}
