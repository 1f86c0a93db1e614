// API and bad-input tests of the installed `leasebeat` package (ES module side).
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'

import * as lb from 'leasebeat'
import { Heartbeat } from 'leasebeat'

const CREATE_OK = JSON.stringify({
  decision: 'ALLOW',
  reservation_id: 'r-1',
  affected_scopes: ['tenant:acme'],
  expires_at_ms: 1785585660000,
  remaining_ttl_ms: 61500
})

/** A heartbeat after the protocol's worked example: create sent at 0, success at 1500 ms. */
function workedExample (opts = {}) {
  const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'key-', ...opts })
  const a = hb.pollAction()
  hb.handleSent(a.attempt.id, 0)
  const d = hb.handleResponse(a.attempt.id, { status: 200, headers: {}, body: CREATE_OK }, 1500)
  return { hb, d }
}

/** Asserts that f throws an instance of cls with this code. */
function throwsCode (f, cls, code, msg) {
  assert.throws(f, (e) => {
    assert.equal(e.constructor, cls, `expected ${cls.name}, got ${e.constructor.name}: ${e.message}`)
    assert.equal(e.code, code)
    if (msg !== undefined) assert.match(e.message, msg)
    return true
  })
}

const INVALID = 'ERR_LEASEBEAT_INVALID_ARGUMENT'

describe('the heartbeat', () => {
  test('the worked example: next beat 37 s after receipt, with the numbers behind it', () => {
    const { hb, d } = workedExample()
    assert.deepEqual(d, {
      next: 'extend',
      at: 38500,
      atNs: 38_500_000_000n,
      key: 'new',
      keyIndex: 2,
      reason: null,
      mode: 'primary',
      numbers: {
        rtt: 1500,
        maxRtt: 1500,
        leadFloor: 60000,
        attemptBudget: 10000,
        safetyMargin: 3000,
        retryReserve: 23000,
        nextDelay: 37000
      },
      warnings: [],
      outcome: 'success',
      detail: null,
      reservationId: 'r-1',
      provenUntil: 61500,
      provenUntilNs: 61_500_000_000n,
      expiresAtMs: 1785585660000,
      remainingTtlMs: 61500
    })
    assert.equal(hb.reservationId, 'r-1')
    assert.equal(hb.mode, 'primary')
    assert.equal(hb.maxRttMs, 1500)
    assert.equal(hb.stopReason, null)
    assert.equal(hb.pollTimeout(), 38_500_000_000n)
    assert.equal(hb.lastEventNs, 1_500_000_000n)
    assert.equal(hb.ttlMs, 60000)
    assert.equal(hb.requestTimeoutMs, 10000)
    assert.deepEqual(hb.lastDecision, d)
    assert.deepEqual(JSON.parse(hb.lastDecisionJson), {
      next: 'extend',
      at: 38500,
      key: 'new',
      key_index: 2,
      mode: 'primary',
      numbers: { rtt: 1500, max_rtt: 1500, lead_floor: 60000, attempt_budget: 10000, safety_margin: 3000, retry_reserve: 23000, next_delay: 37000 },
      proven_until: 61500,
      expires_at_ms: 1785585660000,
      remaining_ttl_ms: 61500,
      warnings: []
    })
  })

  test('pollAction returns plain objects: send, await, then stop', () => {
    const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'k' })
    const send = hb.pollAction()
    assert.equal(send.type, 'send')
    assert.equal('reason' in send, false)
    assert.equal(Object.getPrototypeOf(send), Object.prototype)
    const a = send.attempt
    assert.equal(a.id, 1)
    assert.equal(a.kind, 'create')
    assert.equal(a.key, 'k1')
    assert.equal(a.keyIndex, 1)
    assert.equal(a.keyUse, 'new')
    assert.equal(a.dueMs, 0)
    assert.equal(a.dueNs, 0n)
    assert.equal(a.sentNs, null)
    assert.equal(a.zeroWindowRetry, false)
    assert.ok(Buffer.isBuffer(a.body))
    assert.equal(a.body.toString('utf8'), a.bodyText)
    assert.deepEqual(JSON.parse(a.bodyText), { idempotency_key: 'k1', ttl_ms: 60000 })
    hb.handleSent(1, 2.5)
    const wait = hb.pollAction()
    assert.equal(wait.type, 'await')
    assert.equal(wait.attempt.sentNs, 2_500_000n)
    assert.equal(hb.pollTimeout(), null)
    const d = hb.cancel(3)
    assert.equal(d.next, 'stop')
    assert.equal(d.reason, 'cancelled')
    assert.equal(d.outcome, 'cancelled')
    assert.equal(d.at, null)
    assert.equal(d.atNs, null)
    assert.equal(d.key, null)
    assert.deepEqual(hb.pollAction(), { type: 'stop', reason: 'cancelled' })
    assert.equal(hb.stopReason, 'cancelled')
    assert.equal(hb.attempt, null)
  })

  test('a same-key retry after a timeout reuses the key and the exact body', () => {
    const { hb } = workedExample()
    const first = hb.pollAction().attempt
    hb.handleSent(first.id, 38500)
    const d = hb.handleFailure(first.id, 'timeout', 38600)
    assert.equal(d.next, 'extend')
    assert.equal(d.key, 'same')
    assert.equal(d.outcome, 'transport_failure')
    const retry = hb.pollAction().attempt
    assert.notEqual(retry.id, first.id)
    assert.equal(retry.key, first.key)
    assert.ok(retry.body.equals(first.body))
    assert.deepEqual(JSON.parse(retry.bodyText), { extend_by_ms: 60000, idempotency_key: 'key-2' })
  })

  test('times as bigint nanoseconds and as millisecond numbers agree', () => {
    const run = (t) => {
      const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'k' })
      hb.handleSent(1, t(0))
      return hb.handleResponse(1, { status: 200, body: CREATE_OK }, t(1500.000001))
    }
    const byMs = run((ms) => ms)
    const byNs = run((ms) => BigInt(Math.round(ms * 1e6)))
    assert.deepEqual(byMs, byNs)
    assert.equal(byNs.numbers.rtt, 1501) // 1500.000001 ms rounds up
    // rtt 1501 -> lead floor 59999, margin 3002, reserve 23002, delay 36997
    assert.equal(byNs.atNs, 1_500_000_001n + 36_997_000_000n)
  })

  test('msToNs is the documented conversion ns = round(ms * 1e6)', () => {
    assert.equal(lb.msToNs(0), 0n)
    assert.equal(lb.msToNs(1), 1_000_000n)
    assert.equal(lb.msToNs(1.5), 1_500_000n)
    assert.equal(lb.msToNs(0.0000004), 0n)
    assert.equal(lb.msToNs(0.0000006), 1n)
    assert.equal(typeof lb.msToNs(performance.now()), 'bigint')
    throwsCode(() => lb.msToNs(NaN), RangeError, INVALID, /NaN/)
    throwsCode(() => lb.msToNs(Infinity), RangeError, INVALID, /finite/)
    throwsCode(() => lb.msToNs(-1), RangeError, INVALID, /negative/)
    throwsCode(() => lb.msToNs(2e13), RangeError, INVALID, /overflows/)
    throwsCode(() => lb.msToNs('1'), TypeError, INVALID)
  })

  test('default keys are random UUIDv4', () => {
    const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: null })
    assert.match(hb.attempt.key, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    assert.equal(hb.requestTimeoutMs, null)
  })

  test('createRequest members go into the create body, bigints exactly', () => {
    const hb = new Heartbeat({
      ttlMs: 30000n,
      requestTimeoutMs: 5000,
      createRequest: { subject: { tenant: 'acme' }, estimate: { amount: 2n ** 62n, unit: 'TOKENS' }, dry_run: false, tags: ['a', 1.5, null] }
    })
    const body = hb.attempt.bodyText
    assert.match(body, /"amount":4611686018427387904/)
    assert.match(body, /"ttl_ms":30000/)
    assert.match(body, /"tags":\["a",1.5,null\]/)
  })

  test('unbounded timeouts and huge leads come out as Infinity and bigint', () => {
    const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: null, keyPrefix: 'k' })
    hb.handleSent(1, 0n)
    // remaining_ttl_ms 2^62: the lead needs a bigint, the due time overflows.
    const raw = '{"decision":"ALLOW","reservation_id":"r-9","affected_scopes":["t"],"remaining_ttl_ms":4611686018427387904}'
    const d = hb.handleResponse(1, { status: 200, body: raw }, 0n)
    assert.equal(d.numbers.attemptBudget, Infinity)
    assert.equal(d.numbers.retryReserve, Infinity)
    assert.equal(d.numbers.leadFloor, 4611686018427387904n)
    assert.equal(d.numbers.nextDelay, 0)
    const e = hb.pollAction().attempt
    hb.handleSent(e.id, 1)
    const f = hb.handleFailure(e.id, 'connect', 2)
    assert.equal(f.next, 'stop')
    assert.equal(f.reason, 'retry_window_exhausted')
    assert.equal(f.numbers.retryWindow, -Infinity)
  })

  test('a due time beyond 64-bit nanoseconds is at Infinity with atNs null', () => {
    const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 1000, keyPrefix: 'k' })
    hb.handleSent(1, 0n)
    const raw = '{"decision":"ALLOW","reservation_id":"r-9","affected_scopes":["t"],"remaining_ttl_ms":4611686018427387904}'
    const d = hb.handleResponse(1, { status: 200, body: raw }, 0n)
    assert.equal(d.next, 'extend')
    assert.equal(typeof d.numbers.nextDelay, 'bigint')
    assert.equal(d.at, Infinity)
    assert.equal(d.atNs, null)
    assert.equal(hb.attempt.dueMs, Infinity)
    assert.equal(hb.attempt.dueNs, null)
    assert.equal(hb.pollTimeout(), null)
  })

  test('body as string, Buffer, Uint8Array and ArrayBuffer are the same bytes', () => {
    const bytes = Buffer.from(CREATE_OK)
    const bodies = [CREATE_OK, bytes, new Uint8Array(bytes), bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)]
    const out = bodies.map((body) => {
      const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'k' })
      hb.handleSent(1, 0)
      return hb.handleResponse(1, { status: 200, body }, 1500)
    })
    for (const d of out) assert.deepEqual(d, out[0])
    assert.equal(out[0].outcome, 'success')
  })

  test('headers: case-insensitive names, repeated values as arrays', () => {
    const { hb } = workedExample()
    const a = hb.pollAction().attempt
    hb.handleSent(a.id, 38500)
    const d = hb.handleResponse(a.id, { status: 429, headers: { 'retry-AFTER': ' 2 ' } }, 38600)
    assert.equal(d.next, 'extend')
    assert.equal(d.numbers.retryDelay, 2000)
    const b = hb.pollAction().attempt
    hb.handleSent(b.id, 40600)
    const s = hb.handleResponse(b.id, { status: 429, headers: { 'Retry-After': ['1', '1'] } }, 40700)
    assert.equal(s.reason, 'throttled')
    assert.equal(s.outcome, 'throttled')
  })

  test('timingUnknown makes the lead floor and the delay 0', () => {
    const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'k' })
    hb.handleSent(1, 0)
    const d = hb.handleResponse(1, { status: 200, body: CREATE_OK, timingUnknown: true }, 1500)
    assert.equal(d.numbers.leadFloor, 0)
    assert.equal(d.numbers.nextDelay, 0)
    assert.equal(hb.maxRttMs, 0)
  })
})

describe('an existing reservation (Heartbeat.forReservation)', () => {
  const EXTEND_OK = '{"status":"ACTIVE","expires_at_ms":90000,"remaining_ttl_ms":60000}'

  test('starts with an immediate extension, then schedules as after a create', () => {
    const hb = Heartbeat.forReservation('rsv-9', { ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'k' })
    assert.ok(hb instanceof Heartbeat)
    const send = hb.pollAction()
    assert.equal(send.type, 'send')
    const a = send.attempt
    assert.deepEqual([a.kind, a.id, a.key, a.keyIndex, a.keyUse, a.dueNs], ['extend', 1, 'k1', 1, 'new', 0n])
    assert.equal(a.bodyText, '{"extend_by_ms":60000,"idempotency_key":"k1"}')
    assert.equal(hb.reservationId, 'rsv-9')
    assert.equal(hb.pollTimeout(), 0n)
    assert.equal(hb.ttlMs, 60000)
    assert.equal(hb.requestTimeoutMs, 10000)
    hb.handleSent(1, 0)
    const d = hb.handleResponse(1, { status: 200, body: EXTEND_OK }, 1000)
    assert.equal(d.numbers.nextDelay, 59000 - 22000)
    assert.equal(d.keyIndex, 2)
    assert.equal(d.next, 'extend')
    assert.equal(d.reservationId, 'rsv-9')
  })

  test('before any success nothing proves a lead: a transient failure stops', () => {
    const hb = Heartbeat.forReservation('rsv-9', { ttlMs: 60000, requestTimeoutMs: 10000 })
    assert.match(hb.pollAction().attempt.key, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    hb.handleSent(1, 0n)
    const d = hb.handleFailure(1, 'timeout', 10_000_000_000n)
    assert.equal(d.next, 'stop')
    assert.equal(d.reason, 'retry_window_exhausted')
    assert.equal(hb.stopReason, 'retry_window_exhausted')
  })

  test('without remaining_ttl_ms the first success is the fallback anchor', () => {
    const hb = Heartbeat.forReservation('rsv-9', { ttlMs: 60000, requestTimeoutMs: 10000 })
    hb.handleSent(1, 0n)
    const d = hb.handleResponse(1, { status: 200, body: '{"status":"ACTIVE","expires_at_ms":90000}' }, 1_000_000n)
    assert.equal(d.mode, 'fallback')
    assert.equal(d.atNs, 1_000_000n)
  })

  test('the id counts characters (code points), 1..=128', () => {
    const opts = { ttlMs: 60000, requestTimeoutMs: null }
    assert.equal(Heartbeat.forReservation('x'.repeat(128), opts).reservationId, 'x'.repeat(128))
    // 128 astral characters are 256 UTF-16 units, and still 128 characters.
    const astral = '\u{1F600}'.repeat(128)
    assert.equal(Heartbeat.forReservation(astral, opts).reservationId, astral)
    throwsCode(() => Heartbeat.forReservation('\u{1F600}'.repeat(129), opts), RangeError, INVALID, /reservationId/)
  })

  test('lone surrogates are refused, never replaced by U+FFFD', () => {
    const opts = { ttlMs: 60000, requestTimeoutMs: 10000 }
    const lone = /lone surrogate/
    throwsCode(() => Heartbeat.forReservation('rsv-\uD800', opts), TypeError, INVALID, lone)
    throwsCode(() => Heartbeat.forReservation('\uDC00rsv', opts), TypeError, INVALID, lone)
    throwsCode(() => new Heartbeat({ ...opts, keyPrefix: 'k\uD83D' }), TypeError, INVALID, lone)
    throwsCode(
      () => new Heartbeat({ ...opts, createRequest: { subject: { tenant: 't\uDFFF' } } }),
      TypeError,
      INVALID,
      lone
    )
    // A well-formed pair is one character and is kept exactly.
    assert.equal(Heartbeat.forReservation('rsv-\uD83D\uDE00', opts).reservationId, 'rsv-\u{1F600}')
  })

  test('bad reservation ids', () => {
    const opts = { ttlMs: 60000, requestTimeoutMs: 10000 }
    throwsCode(() => Heartbeat.forReservation('', opts), RangeError, INVALID, /reservationId must be 1\.\.=128 characters, got 0/)
    throwsCode(() => Heartbeat.forReservation('x'.repeat(129), opts), RangeError, INVALID, /got 129/)
    throwsCode(() => Heartbeat.forReservation(null, opts), TypeError, INVALID, /reservationId must be a string, got null/)
    throwsCode(() => Heartbeat.forReservation(undefined, opts), TypeError, INVALID, /reservationId must be a string/)
    throwsCode(() => Heartbeat.forReservation(9, opts), TypeError, INVALID, /reservationId/)
    throwsCode(() => Heartbeat.forReservation(new String('rsv-9'), opts), TypeError, INVALID, /reservationId/)
    throwsCode(() => Heartbeat.forReservation(), TypeError, INVALID, /reservationId/)
  })

  test('bad options', () => {
    const ok = { ttlMs: 60000, requestTimeoutMs: 10000 }
    throwsCode(() => Heartbeat.forReservation('rsv-9'), TypeError, INVALID, /options must be an object/)
    throwsCode(() => Heartbeat.forReservation('rsv-9', null), TypeError, INVALID)
    throwsCode(() => Heartbeat.forReservation('rsv-9', { requestTimeoutMs: 1000 }), TypeError, INVALID, /ttlMs is required/)
    throwsCode(() => Heartbeat.forReservation('rsv-9', { ttlMs: 60000 }), TypeError, INVALID, /requestTimeoutMs is required/)
    throwsCode(() => Heartbeat.forReservation('rsv-9', { ...ok, createRequest: {} }), TypeError, INVALID, /unknown property "createRequest"/)
    throwsCode(() => Heartbeat.forReservation('rsv-9', { ...ok, ttlMs: 999 }), RangeError, 'ERR_LEASEBEAT_INVALID_CONFIG', /options\.ttlMs must be within/)
    throwsCode(() => Heartbeat.forReservation('rsv-9', { ...ok, requestTimeoutMs: -1 }), RangeError, INVALID)
    throwsCode(() => Heartbeat.forReservation('rsv-9', { ...ok, keyPrefix: 7 }), TypeError, INVALID)
    throwsCode(() => Heartbeat.forReservation('rsv-9', { ...ok, keyPrefix: 'x'.repeat(300) }), Error, 'ERR_LEASEBEAT_INVALID_KEY')
  })
})

describe('errors', () => {
  test('every error code is a stable ERR_LEASEBEAT_ string', () => {
    assert.deepEqual(lb.errorCodes(), [
      'ERR_LEASEBEAT_INVALID_CONFIG',
      'ERR_LEASEBEAT_INVALID_ARGUMENT',
      'ERR_LEASEBEAT_TIME_WENT_BACKWARDS',
      'ERR_LEASEBEAT_NOT_OUTSTANDING',
      'ERR_LEASEBEAT_NOT_SENT',
      'ERR_LEASEBEAT_ALREADY_SENT',
      'ERR_LEASEBEAT_STOPPED',
      'ERR_LEASEBEAT_INVALID_KEY',
      'ERR_LEASEBEAT_CLOSED',
      'ERR_LEASEBEAT_POISONED',
      'ERR_LEASEBEAT_JOURNAL'
    ])
  })

  test('bad times: NaN, infinities, negatives and wrong types', () => {
    const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000 })
    throwsCode(() => hb.handleSent(1, NaN), RangeError, INVALID, /now must not be NaN/)
    throwsCode(() => hb.handleSent(1, Infinity), RangeError, INVALID, /finite/)
    throwsCode(() => hb.handleSent(1, -Infinity), RangeError, INVALID, /finite/)
    throwsCode(() => hb.handleSent(1, -1), RangeError, INVALID, /negative/)
    throwsCode(() => hb.handleSent(1, -0.001), RangeError, INVALID, /negative/)
    throwsCode(() => hb.handleSent(1, -1n), RangeError, INVALID, /negative/)
    throwsCode(() => hb.handleSent(1, 2n ** 64n), RangeError, INVALID, /2\^64-1/)
    throwsCode(() => hb.handleSent(1, -(2n ** 200n)), RangeError, INVALID)
    throwsCode(() => hb.handleSent(1, '5'), TypeError, INVALID, /got a string/)
    throwsCode(() => hb.handleSent(1, null), TypeError, INVALID, /got null/)
    throwsCode(() => hb.handleSent(1, undefined), TypeError, INVALID, /got undefined/)
    throwsCode(() => hb.handleSent(1), TypeError, INVALID)
    throwsCode(() => hb.handleSent(1, {}), TypeError, INVALID, /got an object/)
    throwsCode(() => hb.cancel(NaN), RangeError, INVALID)
    // Nothing changed: the attempt is still waiting to be sent.
    assert.equal(hb.pollAction().type, 'send')
    hb.handleSent(1, 2n ** 64n - 1n)
    assert.equal(hb.lastEventNs, 2n ** 64n - 1n)
  })

  test('bad attempt ids: fractions, unsafe integers, wrong types', () => {
    const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000 })
    throwsCode(() => hb.handleSent(1.5, 0), RangeError, INVALID, /integer/)
    throwsCode(() => hb.handleSent(2 ** 53, 0), RangeError, INVALID, /2\^53-1/)
    throwsCode(() => hb.handleSent(-1, 0), RangeError, INVALID)
    throwsCode(() => hb.handleSent(NaN, 0), RangeError, INVALID)
    throwsCode(() => hb.handleSent('1', 0), TypeError, INVALID)
    throwsCode(() => hb.handleSent(2, 0), Error, 'ERR_LEASEBEAT_NOT_OUTSTANDING')
    hb.handleSent(1n, 0)
  })

  test('time going backwards is refused and changes nothing', () => {
    const { hb } = workedExample()
    const a = hb.pollAction().attempt
    throwsCode(() => hb.handleSent(a.id, 1499.999), Error, 'ERR_LEASEBEAT_TIME_WENT_BACKWARDS', /backwards/)
    throwsCode(() => hb.cancel(1_499_999_999n), Error, 'ERR_LEASEBEAT_TIME_WENT_BACKWARDS')
    assert.equal(hb.pollAction().type, 'send')
    hb.handleSent(a.id, 1500) // the same time is not backwards
  })

  test('state errors: not sent, already sent, not outstanding, stopped', () => {
    const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000 })
    throwsCode(() => hb.handleResponse(1, { status: 200 }, 0), Error, 'ERR_LEASEBEAT_NOT_SENT')
    throwsCode(() => hb.handleFailure(1, 'reset', 0), Error, 'ERR_LEASEBEAT_NOT_SENT')
    hb.handleSent(1, 0)
    throwsCode(() => hb.handleSent(1, 0), Error, 'ERR_LEASEBEAT_ALREADY_SENT')
    throwsCode(() => hb.handleResponse(7, { status: 200 }, 0), Error, 'ERR_LEASEBEAT_NOT_OUTSTANDING')
    hb.cancel(1)
    throwsCode(() => hb.cancel(2), Error, 'ERR_LEASEBEAT_STOPPED', /final/)
    throwsCode(() => hb.handleFailure(1, 'timeout', 2), Error, 'ERR_LEASEBEAT_STOPPED')
  })

  test('a key source producing unusable keys is refused with ERR_LEASEBEAT_INVALID_KEY', () => {
    throwsCode(() => new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 1000, keyPrefix: 'x'.repeat(300) }), Error, 'ERR_LEASEBEAT_INVALID_KEY', /256/)
    // A prefix with CR or LF could not be a header value (issue 25).
    for (const bad of ['p\r\nX-Evil: 1\r\n', 'p\n', '\r']) {
      throwsCode(() => new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 1000, keyPrefix: bad }), Error, 'ERR_LEASEBEAT_INVALID_KEY', /header value/)
      throwsCode(() => Heartbeat.forReservation('rsv-9', { ttlMs: 60000, requestTimeoutMs: 1000, keyPrefix: bad }), Error, 'ERR_LEASEBEAT_INVALID_KEY', /header value/)
    }
  })

  test('bad options', () => {
    const ok = { ttlMs: 60000, requestTimeoutMs: 10000 }
    throwsCode(() => new Heartbeat(), TypeError, INVALID, /options must be an object/)
    throwsCode(() => new Heartbeat(null), TypeError, INVALID)
    throwsCode(() => new Heartbeat([]), TypeError, INVALID, /an array/)
    throwsCode(() => new Heartbeat({ requestTimeoutMs: 1000 }), TypeError, INVALID, /ttlMs is required/)
    throwsCode(() => new Heartbeat({ ttlMs: 60000 }), TypeError, INVALID, /requestTimeoutMs is required/)
    throwsCode(() => new Heartbeat({ ...ok, ttl_ms: 1 }), TypeError, INVALID, /unknown property "ttl_ms"/)
    throwsCode(() => new Heartbeat({ ...ok, ttlMs: '60000' }), TypeError, INVALID)
    throwsCode(() => new Heartbeat({ ...ok, ttlMs: 60000.5 }), RangeError, INVALID, /integer/)
    throwsCode(() => new Heartbeat({ ...ok, ttlMs: NaN }), RangeError, INVALID)
    throwsCode(() => new Heartbeat({ ...ok, ttlMs: -1 }), RangeError, INVALID)
    throwsCode(() => new Heartbeat({ ...ok, ttlMs: 999 }), RangeError, 'ERR_LEASEBEAT_INVALID_CONFIG', /options\.ttlMs must be within/)
    throwsCode(() => new Heartbeat({ ...ok, ttlMs: 86400001n }), RangeError, 'ERR_LEASEBEAT_INVALID_CONFIG')
    throwsCode(() => new Heartbeat({ ...ok, requestTimeoutMs: -5 }), RangeError, INVALID)
    throwsCode(() => new Heartbeat({ ...ok, requestTimeoutMs: NaN }), RangeError, INVALID)
    throwsCode(() => new Heartbeat({ ...ok, requestTimeoutMs: '10s' }), TypeError, INVALID)
    throwsCode(() => new Heartbeat({ ...ok, keyPrefix: 7 }), TypeError, INVALID)
    throwsCode(() => new Heartbeat({ ...ok, createRequest: 'x' }), TypeError, INVALID)
    throwsCode(() => new Heartbeat({ ...ok, createRequest: { f: () => 1 } }), TypeError, INVALID, /createRequest\.f/)
    throwsCode(() => new Heartbeat({ ...ok, createRequest: { n: NaN } }), RangeError, INVALID)
    throwsCode(() => new Heartbeat({ ...ok, createRequest: { n: 2n ** 70n } }), RangeError, INVALID)
    throwsCode(() => new Heartbeat({ ...ok, createRequest: { idempotency_key: 'x' } }), RangeError, 'ERR_LEASEBEAT_INVALID_CONFIG')
    throwsCode(() => new Heartbeat({ ...ok, createRequest: { ttl_ms: 1 } }), RangeError, 'ERR_LEASEBEAT_INVALID_CONFIG')
    const deep = {}
    let cur = deep
    for (let i = 0; i < 100; i++) cur = cur.x = {}
    throwsCode(() => new Heartbeat({ ...ok, createRequest: deep }), RangeError, INVALID, /deeper/)
    const cyclic = {}
    cyclic.self = cyclic
    throwsCode(() => new Heartbeat({ ...ok, createRequest: cyclic }), RangeError, INVALID, /deeper/)
    // Infinity as a timeout means unbounded, like null.
    assert.equal(new Heartbeat({ ...ok, requestTimeoutMs: Infinity }).requestTimeoutMs, null)
  })

  test('bad responses', () => {
    const { hb } = workedExample()
    const a = hb.pollAction().attempt
    hb.handleSent(a.id, 38500)
    const id = a.id
    throwsCode(() => hb.handleResponse(id, null, 38600), TypeError, INVALID, /response must be an object/)
    throwsCode(() => hb.handleResponse(id, 200, 38600), TypeError, INVALID)
    throwsCode(() => hb.handleResponse(id, {}, 38600), TypeError, INVALID, /status is required/)
    throwsCode(() => hb.handleResponse(id, { status: '200' }, 38600), TypeError, INVALID)
    throwsCode(() => hb.handleResponse(id, { status: 200.5 }, 38600), RangeError, INVALID)
    throwsCode(() => hb.handleResponse(id, { status: 70000 }, 38600), RangeError, INVALID)
    throwsCode(() => hb.handleResponse(id, { status: 1000 }, 38600), RangeError, INVALID, /100\.\.=999/)
    throwsCode(() => hb.handleResponse(id, { status: 99 }, 38600), RangeError, INVALID)
    throwsCode(() => hb.handleResponse(id, { status: 200, Body: '' }, 38600), TypeError, INVALID, /unknown property "Body"/)
    throwsCode(() => hb.handleResponse(id, { status: 200, body: 5 }, 38600), TypeError, INVALID)
    throwsCode(() => hb.handleResponse(id, { status: 200, body: {} }, 38600), TypeError, INVALID)
    throwsCode(() => hb.handleResponse(id, { status: 200, body: new Float32Array(2) }, 38600), TypeError, INVALID, /typed array/)
    throwsCode(() => hb.handleResponse(id, { status: 200, headers: 'x' }, 38600), TypeError, INVALID)
    throwsCode(() => hb.handleResponse(id, { status: 200, headers: new Map([['a', 1]]) }, 38600), TypeError, INVALID, /response\.headers\[0\]\[1\] must be a string/)
    throwsCode(() => hb.handleResponse(id, { status: 200, headers: [['a']] }, 38600), TypeError, INVALID, /\[name, value\] pair/)
    throwsCode(() => hb.handleResponse(id, { status: 200, headers: ['a: b'] }, 38600), TypeError, INVALID, /\[name, value\] pair/)
    throwsCode(() => hb.handleResponse(id, { status: 200, headers: new Set(['a']) }, 38600), TypeError, INVALID, /\[name, value\] pair/)
    throwsCode(() => hb.handleResponse(id, { status: 200, headers: { a: 1 } }, 38600), TypeError, INVALID)
    throwsCode(() => hb.handleResponse(id, { status: 200, headers: { a: ['x', 2] } }, 38600), TypeError, INVALID)
    throwsCode(() => hb.handleResponse(id, { status: 200, timingUnknown: 1 }, 38600), TypeError, INVALID)
    throwsCode(() => hb.handleFailure(id, 'boom', 38600), RangeError, INVALID, /'timeout', 'connect' or 'reset'/)
    throwsCode(() => hb.handleFailure(id, 5, 38600), TypeError, INVALID)
    // None of it changed anything: the attempt is still in flight.
    assert.equal(hb.pollAction().type, 'await')
    assert.equal(hb.handleResponse(id, { status: 503, headers: null, body: null }, 38600).key, 'same')
  })

  test('a closed heartbeat throws ERR_LEASEBEAT_CLOSED everywhere', () => {
    const { hb } = workedExample()
    assert.equal(hb.closed, false)
    hb.close()
    hb.close() // idempotent
    assert.equal(hb.closed, true)
    const calls = [
      () => hb.pollAction(),
      () => hb.pollTimeout(),
      () => hb.handleSent(2, 40000),
      () => hb.handleResponse(2, { status: 200 }, 40000),
      () => hb.handleFailure(2, 'timeout', 40000),
      () => hb.cancel(40000),
      () => hb.reservationId,
      () => hb.stopReason,
      () => hb.mode,
      () => hb.maxRttMs,
      () => hb.lastDecision,
      () => hb.lastDecisionJson,
      () => hb.attempt,
      () => hb.lastEventNs,
      () => hb.ttlMs,
      () => hb.requestTimeoutMs
    ]
    for (const f of calls) throwsCode(f, Error, 'ERR_LEASEBEAT_CLOSED', /closed/)
  })
})

describe('the pure arithmetic', () => {
  test('the protocol worked examples', () => {
    assert.deepEqual(lb.primarySchedule(61500, 1500, 10000, 1500), {
      leadFloor: 60000, attemptBudget: 10000, safetyMargin: 3000, retryReserve: 23000, nextDelay: 37000
    })
    const s = lb.primarySchedule(60000, 0, 30000, 0)
    assert.equal(s.retryReserve, 61000)
    assert.equal(s.nextDelay, 0)
    assert.deepEqual(lb.primarySchedule(61500, null, 10000, 0), {
      leadFloor: 0, attemptBudget: 10000, safetyMargin: 1000, retryReserve: 21000, nextDelay: 0
    })
  })

  test('budgets, margins and reserves', () => {
    assert.equal(lb.attemptBudget(10000, 1500), 10000)
    assert.equal(lb.attemptBudget(200, 300), 1000)
    assert.equal(lb.attemptBudget(2000, 1500), 3000)
    assert.equal(lb.attemptBudget(null, 0), Infinity)
    assert.equal(lb.attemptBudget(Infinity, 0), Infinity)
    assert.equal(lb.attemptBudget(2n ** 64n - 1n, 0), Infinity)
    assert.equal(lb.attemptBudget(2n ** 60n, 0), 2n ** 60n)
    assert.equal(lb.safetyMargin(1500), 3000)
    assert.equal(lb.safetyMargin(20), 1000)
    assert.equal(lb.retryReserve(10000, 3000), 23000)
    assert.equal(lb.retryReserve(Infinity, 3000), Infinity)
    assert.equal(lb.retryReserve(2n ** 63n, 0), Infinity)
    assert.equal(lb.ceilMs(1_500_000_001), 1501)
    assert.equal(lb.ceilMs(1_500_000_000n), 1500)
    assert.equal(lb.ceilMs(0), 0)
    assert.equal(lb.ceilMs(2n ** 64n - 1n), 18446744073710)
    throwsCode(() => lb.ceilMs(Infinity), RangeError, INVALID)
    throwsCode(() => lb.safetyMargin(-1), RangeError, INVALID)
    throwsCode(() => lb.safetyMargin(1.5), RangeError, INVALID)
    throwsCode(() => lb.safetyMargin(NaN), RangeError, INVALID)
    throwsCode(() => lb.safetyMargin(-Infinity), RangeError, INVALID)
    throwsCode(() => lb.safetyMargin('1'), TypeError, INVALID)
    throwsCode(() => lb.attemptBudget(undefined, 0), TypeError, INVALID)
  })

  test('retry windows', () => {
    assert.deepEqual(lb.retryWindow(60000, 45000, 7000, 1000), { lead: 15000, window: 7000, delay: 3750 })
    assert.deepEqual(lb.retryWindow(60000, 52000, 7000, 1000), { lead: 8000, window: 0, delay: 0 })
    assert.deepEqual(lb.retryWindow(60000, 52001, 7000, 1000), { lead: 7999, window: -1, delay: null })
    assert.deepEqual(lb.retryWindow(60000, 0, Infinity, 1000), { lead: 60000, window: -Infinity, delay: null })
  })

  test('Retry-After', () => {
    assert.deepEqual(lb.parseRetryAfter(' 2 '), { ms: 2000, error: null })
    assert.deepEqual(lb.parseRetryAfter(['0']), { ms: 0, error: null })
    assert.deepEqual(lb.parseRetryAfter('+3'), { ms: null, error: 'invalid' })
    assert.deepEqual(lb.parseRetryAfter('2, 3'), { ms: null, error: 'multiple' })
    assert.deepEqual(lb.parseRetryAfter(['1', '2']), { ms: null, error: 'multiple' })
    assert.deepEqual(lb.parseRetryAfter('18446744073709552'), { ms: null, error: 'overflow' })
    assert.deepEqual(lb.parseRetryAfter(null), { ms: null, error: 'missing' })
    assert.deepEqual(lb.parseRetryAfter([]), { ms: null, error: 'missing' })
    assert.deepEqual(lb.parseRetryAfter(), { ms: null, error: 'missing' })
    assert.deepEqual(lb.parseRetryAfter('9007199254741'), { ms: 9007199254741000n, error: null })
    throwsCode(() => lb.parseRetryAfter(5), TypeError, INVALID)
    throwsCode(() => lb.parseRetryAfter([5]), TypeError, INVALID)
  })

  test('the fallback', () => {
    assert.equal(lb.holdCadence(60000), 30000)
    assert.equal(lb.holdCadence(4000), 2000)
    assert.equal(lb.holdCadence(1000), 1000)
    assert.deepEqual(lb.fallbackCadence(60000, 30000, 60000), { cadence: 30000, hold: false })
    assert.equal(lb.fallbackCadence(30000, 30000, 60000).hold, true)
    assert.equal(lb.fallbackCadence(10000, 30000, 60000).cadence, 5000)
    assert.equal(lb.fallbackCadence(-5, 30000, 60000).hold, true)
    assert.equal(lb.fallbackCadence(-(2n ** 100n), 30000, 60000).hold, true)
    assert.equal(lb.fallbackSkips(100000, 20000, 10000), 7)
    assert.equal(lb.fallbackSkips(10000, 20000, 10000), 0)
    assert.equal(lb.fallbackSkips(-5000, 20000, 10000), 0)
    assert.equal(lb.fallbackSkips(2n ** 100n, 1, 1000), Infinity)
    throwsCode(() => lb.fallbackSkips(2n ** 127n, 1, 1000), RangeError, INVALID)
    throwsCode(() => lb.fallbackCadence(0.5, 1, 1), RangeError, INVALID)
  })

  test('stop reasons and permanent codes', () => {
    assert.deepEqual(lb.stopReasons(), [
      'lease_too_short', 'retry_window_exhausted', 'no_progress', 'throttled', 'expired', 'finalized',
      'max_extensions', 'tenant_closed', 'not_found', 'rejected', 'unexpected_status', 'create_failed',
      'create_rejected', 'no_reservation', 'cancelled'
    ])
    assert.equal(lb.permanentReason('RESERVATION_EXPIRED'), 'expired')
    assert.equal(lb.permanentReason('NOT_FOUND'), 'not_found')
    assert.equal(lb.permanentReason('BUDGET_EXCEEDED'), null)
    throwsCode(() => lb.permanentReason(404), TypeError, INVALID)
  })

  test('constants', () => {
    assert.equal(lb.DEFAULT_TTL_MS, 60000)
    assert.equal(lb.MIN_TTL_MS, 1000)
    assert.equal(lb.MAX_TTL_MS, 86400000)
  })
})
