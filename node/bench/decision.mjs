// Benchmark of one primary decision through the Node API (issue 15), beside
// JSON.parse of the same body. Not a test: nothing here asserts on time.
// Run by scripts/bench-node.sh; LEASEBEAT_ENTRY names the package entry to
// load (default: ../main.js, i.e. this checkout with a built addon).
//
// Fixture (the same as core/benches/heartbeat.rs): ttl 60000 ms, request
// timeout 10000 ms, sequential keys 'k1', 'k2', ...; the create (attempt 1)
// sent at 0 and answered 200 at 1500 ms with CREATE; the first extend
// (attempt 2) sent at 38500 ms. The timed operation is, on such a heartbeat:
//   hb.handleResponse(2, { status: 200, body: EXTEND }, 38600)   // -> Decision
//   hb.pollAction()                                               // -> { type: 'send', attempt }
// i.e. the argument conversion of the response object and its body, the
// core's schema check and primary arithmetic, the building of the Decision
// (with its numbers, bigints and strings) and of the send Action with its
// Attempt (key, body Buffer, bodyText, bigints). Heartbeats are prepared in
// batches outside the timed region (each decision needs an in-flight
// attempt); the timed loop walks a batch of 64, small enough to stay in
// the caches as criterion's batched setup does (a heartbeat used once after
// a cold setup costs about twice as much, mostly cache misses). Rounds are
// short (about 100 us) and the median of 1001 drops the rounds a young
// collection or the machine's load hit; the cases take turns round by round. With --expose-gc a full collection
// also runs between the setup and each timed round (off by default: it
// evicts the caches). JSON.parse is timed on the same
// body as a string, its result kept alive the same way.
import { createRequire } from 'node:module'
import { performance } from 'node:perf_hooks'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const entry = process.env.LEASEBEAT_ENTRY ?? path.join(here, '..', 'main.js')
const { Heartbeat } = createRequire(import.meta.url)(entry)

const CREATE = '{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:acme"],"expires_at_ms":1785585660000,"remaining_ttl_ms":61500}'
const EXTEND = '{"status":"ACTIVE","expires_at_ms":1785585720000,"remaining_ttl_ms":60000}'
const CREATE_BYTES = new TextEncoder().encode(CREATE)
const EXTEND_BYTES = new TextEncoder().encode(EXTEND)

const BATCH = Number(process.env.LEASEBEAT_BENCH_BATCH ?? 64)
const ROUNDS = Number(process.env.LEASEBEAT_BENCH_ROUNDS ?? 1001)
const WARMUP = Number(process.env.LEASEBEAT_BENCH_WARMUP ?? 100)

function inFlight () {
  const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'k' })
  hb.handleSent(1, 0)
  hb.handleResponse(1, { status: 200, body: CREATE_BYTES }, 1500)
  hb.handleSent(2, 38500)
  return hb
}

function decided () {
  const hb = inFlight()
  hb.handleResponse(2, { status: 200, body: EXTEND_BYTES }, 38600)
  return hb
}

function batch (make = inFlight) {
  const out = new Array(BATCH)
  for (let i = 0; i < BATCH; i++) out[i] = make()
  return out
}

// Results go to one variable: each dies young, as a caller's would.
let sink = null
let sinkD = null

const cases = {
  // The figure of node.decision: body as bytes, as fetch's arrayBuffer() gives it.
  'decision (Uint8Array body)': (hbs) => {
    const t0 = performance.now()
    for (let i = 0; i < hbs.length; i++) {
      const hb = hbs[i]
      const d = hb.handleResponse(2, { status: 200, body: EXTEND_BYTES }, 38600)
      sink = hb.pollAction()
      sinkD = d
    }
    return performance.now() - t0
  },
  'decision (string body)': (hbs) => {
    const t0 = performance.now()
    for (let i = 0; i < hbs.length; i++) {
      const hb = hbs[i]
      const d = hb.handleResponse(2, { status: 200, body: EXTEND }, 38600)
      sink = hb.pollAction()
      sinkD = d
    }
    return performance.now() - t0
  },
  'handleResponse only (Uint8Array body)': (hbs) => {
    const t0 = performance.now()
    for (let i = 0; i < hbs.length; i++) {
      sink = hbs[i].handleResponse(2, { status: 200, body: EXTEND_BYTES }, 38600)
    }
    return performance.now() - t0
  },
  // Set up with the decision already made: the poll that follows it (served
  // from what handleResponse wrote, no native call), a new attempt each.
  'pollAction right after the decision': (hbs) => {
    const t0 = performance.now()
    for (let i = 0; i < hbs.length; i++) {
      sink = hbs[i].pollAction()
    }
    return performance.now() - t0
  },
  'JSON.parse (string body)': (hbs) => {
    const t0 = performance.now()
    for (let i = 0; i < hbs.length; i++) {
      sink = JSON.parse(EXTEND)
    }
    return performance.now() - t0
  }
}

function median (xs) {
  const s = [...xs].sort((a, b) => a - b)
  return s[(s.length - 1) >> 1]
}

function check () {
  const hb = inFlight()
  const d = hb.handleResponse(2, { status: 200, body: EXTEND_BYTES }, 38600)
  const a = hb.pollAction()
  if (d.next !== 'extend' || d.mode !== 'primary' || d.remainingTtlMs !== 60000 ||
      a.type !== 'send' || a.attempt.key !== 'k3' || !Buffer.isBuffer(a.attempt.body)) {
    throw new Error(`unexpected fixture result: ${JSON.stringify({ d, a }, (k, v) => typeof v === 'bigint' ? `${v}n` : v)}`)
  }
}

check()
// The cases take turns round by round (each round runs every case once), so
// that all of them see the same phases of the machine's speed, which drifts
// over seconds here; one case after another would charge a slow phase to
// whichever case ran in it.
const only = process.env.LEASEBEAT_BENCH_ONLY
const chosen = Object.entries(cases).filter(([name]) => !only || name.startsWith(only))
const per = Object.fromEntries(chosen.map(([name]) => [name, []]))
for (let r = 0; r < WARMUP + ROUNDS; r++) {
  for (const [name, fn] of chosen) {
    const hbs = name.startsWith('JSON') ? new Array(BATCH) : batch(name.startsWith('pollAction') ? decided : inFlight)
    // With --expose-gc, a full collection outside the timed region: the
    // garbage of earlier rounds is collected and this batch is promoted to
    // the old generation, so that the young collections during the timed
    // loop do not copy the setup's objects.
    globalThis.gc?.()
    const ms = fn(hbs)
    if (r >= WARMUP) per[name].push((ms * 1e6) / BATCH)
  }
}
if (sinkD === undefined) throw new Error('unreachable')
const results = Object.fromEntries(
  chosen.map(([name]) => [name, { median: median(per[name]), min: Math.min(...per[name]) }]))

const pad = (s, n) => String(s).padEnd(n)
console.log(`node ${process.version}, batch ${BATCH}, ${ROUNDS} rounds after ${WARMUP} warm-up rounds (ns per operation)`)
console.log(`${pad('what', 40)} ${pad('median', 10)} min`)
for (const [name, r] of Object.entries(results)) {
  console.log(`${pad(name, 40)} ${pad(r.median.toFixed(0), 10)} ${r.min.toFixed(0)}`)
}
const line = (id, what, value) => console.log(`BENCH ${JSON.stringify({ id, what, value: Math.round(value), unit: 'ns' })}`)
if (results['decision (Uint8Array body)']) {
  line('node.decision', 'Node: handleResponse(200 extend body as Uint8Array) + pollAction, median ns', results['decision (Uint8Array body)'].median)
}
if (results['JSON.parse (string body)']) {
  line('node.json_parse', 'Node: JSON.parse of the same extend body (string), median ns', results['JSON.parse (string body)'].median)
}
