// Helper of fast.test.mjs (not a test itself): replays every vector through
// the installed package and prints, in order, everything the Heartbeat
// methods returned or threw, with key order, types and prototypes made
// visible. fast.test.mjs runs it with the fast path (fast.js) and with the
// regular native methods (LEASEBEAT_INTERNAL_SLOW_PATH=1) and compares.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'

import { Heartbeat } from 'leasebeat'
import { parseScenario, replay } from './replay.mjs'

const out = []

function ser (v) {
  if (typeof v === 'bigint') return `${v}n`
  if (typeof v === 'number') return Object.is(v, -0) ? '-0' : String(v)
  if (typeof v === 'string') return JSON.stringify(v)
  if (v === null || v === undefined || typeof v === 'boolean') return String(v)
  if (v instanceof Heartbeat) return 'Heartbeat'
  if (Buffer.isBuffer(v)) return `Buffer(${v.toString('hex')})`
  if (Array.isArray(v)) return `[${v.map(ser).join(',')}]`
  if (typeof v === 'object') {
    const mark = Object.getPrototypeOf(v) === Object.prototype ? '' : `<${v.constructor && v.constructor.name}>`
    return `${mark}{${Object.keys(v).map((k) => `${k}:${ser(v[k])}`).join(',')}}`
  }
  return `<${typeof v}>`
}

function record (name, f) {
  try {
    const r = f()
    out.push(`${name} -> ${ser(r)}`)
    return r
  } catch (e) {
    out.push(`${name} throws ${e.constructor.name} ${e.code} ${e.message}`)
    throw e
  }
}

const proto = Heartbeat.prototype
for (const m of ['pollAction', 'handleResponse', 'handleFailure', 'cancel', 'handleSent', 'pollTimeout']) {
  const f = proto[m]
  proto[m] = function (...args) { return record(m, () => f.apply(this, args)) }
}
for (const g of ['attempt', 'lastDecision', 'lastDecisionJson', 'reservationId', 'stopReason', 'mode', 'lastEventNs', 'ttlMs', 'requestTimeoutMs', 'maxRttMs', 'closed']) {
  const get = Object.getOwnPropertyDescriptor(proto, g).get
  Object.defineProperty(proto, g, { get () { return record(g, () => get.call(this)) } })
}
// (The statics are not configurable; adoptCreate's decision is the one
// lastDecision reads.)

const dir = process.argv[2]
for (const file of readdirSync(dir).filter((f) => f.endsWith('.json')).sort()) {
  out.push(`# ${file}`)
  try {
    const decisions = replay(parseScenario(readFileSync(join(dir, file), 'utf8')))
    out.push(`replayed ${decisions.length}`)
  } catch (e) {
    out.push(`replay failed: ${e.message}`)
  }
}

// Bad input and the less common shapes, through the same wrappers.
const CREATE = '{"decision":"ALLOW","reservation_id":"r-\\u00e9\\ud83d\\ude00","affected_scopes":["tenant:acme"],"expires_at_ms":1785585660000,"remaining_ttl_ms":61500}'
const tryIt = (f) => { try { f() } catch {} }
for (const bad of [null, [], 'x', { status: 200, extra: 1 }, { body: CREATE }, { status: 99 }, { status: 200, body: 5 },
  { status: 200, body: 'a\ud800' }, { status: 200, timingUnknown: 1 }, Object.create({ status: 200 }),
  { status: 200, headers: 7 }]) {
  const b = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'b' })
  b.handleSent(1, 0)
  tryIt(() => b.handleResponse(1, bad, 1))
  b.attempt
}
// Odd numbers (fast.js passes numbers to the addon through the scratch).
for (const [id, status, now] of [[NaN, 200, 1], [-0, 200, 1], [Infinity, 200, 1], [2 ** 53, 200, 1], [-1, 200, 1],
  [1, NaN, 1], [1, 1000, 1], [1, 99.5, 1], [1, -200, 1], [1, Infinity, 1], [1, 200, NaN], [1, 200, -1],
  [1, 200, Infinity], [1, 200, 2 ** 70], [1, 200, -0], [1, 200, 0.0000004], [2, 200, 1], [1n, 200, 1], [1, 200n, 1], [1, 200, 1n]]) {
  for (const body of [CREATE, new TextEncoder().encode(CREATE), 7, null]) {
    const b = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'n' })
    b.handleSent(1, 0)
    tryIt(() => b.handleResponse(id, { status, body }, now))
    b.attempt
  }
}
// String bodies with real non-ASCII text (read as UTF-8 when well formed):
// whitespace before the members moves 'é' and the emoji across 1 KiB (the
// addon's first read), and a lone surrogate far into a long body.
for (let pad = 990; pad <= 1030; pad++) {
  const b = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'u' })
  b.handleSent(1, 0)
  tryIt(() => b.handleResponse(1, { status: 200, body: '{' + ' '.repeat(pad) + '"reservation_id":"r-\u00e9\ud83d\ude00\u00e9","decision":"ALLOW","affected_scopes":["tenant:acme"],"expires_at_ms":1785585660000,"remaining_ttl_ms":61500}' }, 1))
  b.reservationId
}
for (const body of ['{' + ' '.repeat(5000) + '"reservation_id":"r-\ud800"}', '{"reservation_id":"\u00e9' + '\ud83d\ude00'.repeat(600) + '"}', '\u00e9'.repeat(2000)]) {
  const b = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'v' })
  b.handleSent(1, 0)
  tryIt(() => b.handleResponse(1, { status: 99, body }, 1))
  tryIt(() => b.handleResponse(1, { status: 200, body }, 1))
  b.attempt
}
// Every plain getter and pollTimeout() (recorded by the wrappers above).
const GETTERS = ['reservationId', 'stopReason', 'mode', 'lastEventNs', 'ttlMs', 'requestTimeoutMs', 'maxRttMs', 'closed']
function probe (h) {
  for (const g of GETTERS) tryIt(() => h[g])
  tryIt(() => h.pollTimeout())
}
for (const g of GETTERS) tryIt(() => Object.getOwnPropertyDescriptor(proto, g).get.call({}))
tryIt(() => proto.pollTimeout.call({}))
// Receivers that are not a Heartbeat: an object made with Object.create of
// a heartbeat (before and after the heartbeat's own first call: it must
// never act on its prototype's lease), a plain object, none at all.
{
  const parent = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'd' })
  const early = Object.create(parent)
  const members = (x) => {
    probe(x)
    tryIt(() => x.pollAction())
    tryIt(() => x.attempt)
    tryIt(() => x.lastDecision)
    tryIt(() => x.handleSent(1, 0))
    tryIt(() => x.handleResponse(1, { status: 200, body: CREATE }, 1))
    tryIt(() => x.handleFailure(1, 'timeout', 1))
    tryIt(() => x.cancel(2))
    tryIt(() => x.close())
  }
  members(early)
  parent.pollAction()
  parent.handleSent(1, 0)
  members(Object.create(parent))
  members(Object.freeze(Object.create(parent)))
  members(Object.create(Object.freeze(new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000 }))))
  for (const m of ['pollAction', 'handleSent', 'handleResponse', 'handleFailure', 'cancel', 'close', 'pollTimeout']) {
    tryIt(() => proto[m].call({}, 1, { status: 200 }, 1))
    tryIt(() => proto[m].call(undefined, 1, { status: 200 }, 1))
  }
  for (const g of ['attempt', 'lastDecision', 'lastDecisionJson']) tryIt(() => Object.getOwnPropertyDescriptor(proto, g).get.call(undefined))
  // The parent is untouched: its create is still in flight.
  probe(parent)
  parent.attempt
  parent.handleResponse(1, { status: 200, body: CREATE }, 1500)
  parent.pollAction()
}
for (const options of [{ ttlMs: 60000, requestTimeoutMs: 2 ** 60 }, { ttlMs: 2 ** 60, requestTimeoutMs: 2n ** 60n }, { ttlMs: 60000 }]) {
  tryIt(() => probe(new Heartbeat(options)))
}
tryIt(() => probe(Heartbeat.forReservation('r-\u00e9', { ttlMs: 60000, requestTimeoutMs: 10000 })))
const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'k\u00e9\ud83d\ude00-' })
const attempt = () => hb.attempt
tryIt(() => hb.handleResponse(1, { status: 200, body: CREATE }, 1))
hb.pollAction()
hb.handleSent(1, 0)
tryIt(() => hb.handleResponse(1.5, { status: 200, body: CREATE }, 1))
tryIt(() => hb.handleResponse(1, { status: 200, body: CREATE }, -1))
tryIt(() => hb.handleResponse(7, { status: 200, body: CREATE }, 1))
hb.handleResponse(1, { status: 200, headers: new Headers({ 'x-a': 'b' }), body: new TextEncoder().encode(CREATE).buffer }, 1500n * 1000000n)
attempt()
hb.pollAction()
hb.handleSent(hb.attempt.id, 38500)
hb.handleResponse(hb.attempt.id, { status: 429, headers: { 'Retry-After': '1' }, body: null }, 38600)
hb.pollAction()
hb.lastDecision
hb.handleSent(hb.attempt.id, 40000)
hb.handleFailure(hb.attempt.id, 'timeout', 41000)
hb.pollAction()
tryIt(() => hb.handleFailure(hb.attempt.id, 'nope', 41001))
hb.cancel(42000)
hb.pollAction()
attempt()
tryIt(() => hb.cancel(42001))
probe(hb)
hb.close()
probe(hb)
tryIt(() => hb.pollAction())
tryIt(() => hb.lastDecision)
tryIt(() => hb.attempt)
const frozen = Object.freeze(new Heartbeat({ ttlMs: 60000, requestTimeoutMs: null, keyPrefix: 'f' }))
frozen.pollAction()
frozen.attempt
frozen.handleSent(1, 0)
frozen.handleResponse(1, { status: 200, body: CREATE, timingUnknown: true }, 5)
frozen.pollAction()
frozen.lastDecision
probe(frozen)

// Interleaved heartbeats: the action written with one heartbeat's decision
// must never be served to another, nor after a state change or close().
const EXTEND = '{"status":"ACTIVE","expires_at_ms":1785585720000,"remaining_ttl_ms":60000}'
const pair = ['p', 'q'].map((k) => {
  const x = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: k })
  x.handleSent(1, 0)
  return x
})
pair[0].handleResponse(1, { status: 200, body: CREATE }, 1500)
pair[1].handleResponse(1, { status: 200, body: CREATE }, 1600)
pair[0].pollAction()
pair[1].pollAction()
pair[0].pollAction()
pair[0].handleSent(2, 38500)
pair[0].pollAction()
pair[1].attempt
pair[1].pollAction()
pair[0].handleResponse(2, { status: 200, body: EXTEND }, 38600)
probe(pair[0])
pair[1].handleSent(2, 38600)
pair[0].pollAction()
pair[1].pollAction()
tryIt(() => pair[0].handleResponse(3, { status: 200, body: EXTEND }, 38700)) // not sent yet: throws
pair[0].pollAction()
pair[1].handleResponse(2, { status: 200, headers: [['x', 'y']], body: EXTEND }, 38700)
probe(pair[1])
pair[1].close()
probe(pair[1])
tryIt(() => pair[1].pollAction())
pair[0].handleSent(3, 76000)
pair[0].handleResponse(3, Object.assign(Object.create(null), { status: 200, body: EXTEND }), 76100)
pair[0].pollAction()
pair[0].cancel(76200)
pair[0].pollAction()
probe(pair[0])

process.stdout.write(out.join('\n') + '\n')
