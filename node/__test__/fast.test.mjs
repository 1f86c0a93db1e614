// The fast path (fast.js: decisions and attempts written by the addon into a
// scratch buffer and built as object literals) returns exactly what the
// regular native methods return: same values, types, key order and
// prototypes, same errors, over every vector and a set of odd inputs.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { join, resolve, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'

import { Heartbeat } from 'leasebeat'

const here = dirname(fileURLToPath(import.meta.url))
const dir = resolve(process.env.LEASEBEAT_VECTORS_DIR ?? join(here, '..', '..', 'tests', 'vectors'))

function dump (slow) {
  const env = { ...process.env, LEASEBEAT_INTERNAL_SLOW_PATH: slow ? '1' : '0' }
  return execFileSync(process.execPath, [join(here, 'fast-dump.mjs'), dir], { env, encoding: 'utf8', maxBuffer: 1 << 28 })
}

test('the fast path is installed and hides its native helpers', () => {
  const proto = Heartbeat.prototype
  assert.doesNotMatch(Function.prototype.toString.call(proto.handleResponse), /native code/)
  assert.doesNotMatch(Function.prototype.toString.call(proto.pollAction), /native code/)
  for (const k of Object.getOwnPropertyNames(proto)) assert.ok(!k.startsWith('__'), k)
})

test('fast and regular paths return the same objects and errors', () => {
  const fast = dump(false).split('\n')
  const slow = dump(true).split('\n')
  assert.ok(fast.length > 1000, `only ${fast.length} lines`)
  assert.ok(!fast.some((l) => l.startsWith('replay failed')), fast.find((l) => l.startsWith('replay failed')))
  for (let i = 0; i < Math.max(fast.length, slow.length); i++) {
    assert.equal(fast[i], slow[i], `line ${i + 1} differs`)
  }
})

test('an object made with Object.create(heartbeat) is refused and never acts on the heartbeat', () => {
  const CREATE = '{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:acme"],"expires_at_ms":1785585660000,"remaining_ttl_ms":61500}'
  const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'k' })
  const refused = { name: 'TypeError', code: 'ERR_LEASEBEAT_INVALID_ARGUMENT', message: /not a Heartbeat/ }
  const calls = (x) => [
    () => x.pollAction(), () => x.handleSent(1, 0), () => x.handleResponse(1, { status: 200, body: CREATE }, 1500),
    () => x.handleFailure(1, 'timeout', 1500), () => x.cancel(1500), () => x.close(), () => x.pollTimeout(),
    () => x.attempt, () => x.lastDecision, () => x.lastDecisionJson, () => x.reservationId, () => x.stopReason,
    () => x.mode, () => x.lastEventNs, () => x.ttlMs, () => x.requestTimeoutMs, () => x.maxRttMs, () => x.closed
  ]
  // Before and after the heartbeat's own first call (which caches its native handle).
  for (const f of calls(Object.create(hb))) assert.throws(f, refused)
  assert.equal(hb.pollAction().attempt.key, 'k1')
  hb.handleSent(1, 0)
  const derived = Object.create(hb)
  for (const f of calls(derived)) assert.throws(f, refused)
  for (const f of calls(Object.freeze(Object.create(hb)))) assert.throws(f, refused)
  // Unbound calls too.
  const { pollAction } = hb
  assert.throws(() => pollAction(), refused)
  // The heartbeat itself is untouched: its create is still in flight, open, not cancelled.
  assert.equal(hb.closed, false)
  assert.equal(hb.stopReason, null)
  assert.equal(hb.attempt.sentNs, 0n)
  const d = hb.handleResponse(1, { status: 200, body: CREATE }, 1500)
  assert.equal(d.next, 'extend')
  assert.equal(hb.reservationId, 'r-1')
  // A subclass instance is a Heartbeat.
  class Mine extends Heartbeat {}
  const mine = new Mine({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'm' })
  assert.equal(mine.pollAction().attempt.key, 'm1')
  assert.equal(mine.closed, false)
})
