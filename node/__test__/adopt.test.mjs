// Adopting a create the caller performed (issue 10), decisions carrying the
// lease's instants, and the natural input forms (Headers, Map, entries,
// bytes) of the installed `leasebeat` package.
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'

import { Heartbeat } from 'leasebeat'

const INVALID = 'ERR_LEASEBEAT_INVALID_ARGUMENT'
const OPTS = { ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'key-' }
const CREATE_OK = {
  decision: 'ALLOW',
  reservation_id: 'r-1',
  affected_scopes: ['tenant:acme'],
  expires_at_ms: 1785585661500,
  remaining_ttl_ms: 61500
}

function throwsCode (f, cls, code, msg) {
  assert.throws(f, (e) => {
    assert.equal(e.constructor, cls, `expected ${cls.name}, got ${e.constructor.name}: ${e.message}`)
    assert.equal(e.code, code)
    if (msg !== undefined) assert.match(e.message, msg)
    return true
  })
}

describe('Heartbeat.adoptCreate', () => {
  test('a successful create anchors the schedule: no extra extension', () => {
    const { heartbeat: hb, decision: d } = Heartbeat.adoptCreate(OPTS, {
      key: 'sdk-key-1',
      sentAt: 0,
      receivedAt: 1500,
      response: { status: 200, headers: new Headers({ 'Content-Type': 'application/json' }), body: JSON.stringify(CREATE_OK) }
    })
    assert.ok(hb instanceof Heartbeat)
    assert.equal(d.next, 'extend')
    assert.equal(d.atNs, 38_500_000_000n) // 1500 + 60000 - 23000: the first beat, not an immediate one
    assert.equal(d.key, 'new')
    assert.equal(d.keyIndex, 2) // the adopted key is key 1
    assert.equal(d.provenUntil, 61500)
    assert.equal(d.provenUntilNs, 61_500_000_000n)
    assert.equal(d.expiresAtMs, 1785585661500)
    assert.equal(d.remainingTtlMs, 61500)
    assert.equal(hb.reservationId, 'r-1')
    assert.deepEqual(hb.lastDecision, d)
    const a = hb.pollAction()
    assert.equal(a.type, 'send')
    if (a.type === 'send') {
      assert.equal(a.attempt.id, 2)
      assert.equal(a.attempt.kind, 'extend')
      assert.equal(a.attempt.key, 'key-1')
    }
  })

  test('a timed-out create asks for the same-key retry with the caller\'s exact body', () => {
    const body = new TextEncoder().encode('{"idempotency_key":"sdk-key-1","ttl_ms":60000,"subject":{"tenant":"acme"}}')
    const { heartbeat: hb, decision: d } = Heartbeat.adoptCreate(OPTS, {
      key: 'sdk-key-1', sentAt: 0n, receivedAt: 10_000_000_000n, failure: 'timeout', requestBody: body.buffer
    })
    assert.deepEqual([d.next, d.key, d.keyIndex, d.provenUntil], ['create', 'same', 1, null])
    const a = hb.pollAction()
    assert.equal(a.type, 'send')
    if (a.type !== 'send') return
    assert.equal(a.attempt.key, 'sdk-key-1')
    assert.deepEqual(new Uint8Array(a.attempt.body), body)
  })

  test('without the request body a retry sends the body built from the options', () => {
    const { heartbeat: hb } = Heartbeat.adoptCreate({ ...OPTS, createRequest: { subject: { tenant: 'a' } } }, {
      key: 'k', sentAt: 0, receivedAt: 100, response: { status: 503, body: Buffer.from('{}') }
    })
    const a = hb.pollAction()
    assert.equal(a.type, 'send')
    if (a.type === 'send') assert.deepEqual(JSON.parse(a.attempt.bodyText), { idempotency_key: 'k', subject: { tenant: 'a' }, ttl_ms: 60000 })
  })

  test('unknown timing: lead floor 0, an immediate first extension', () => {
    const { decision: d } = Heartbeat.adoptCreate(OPTS, {
      key: 'k', sentAt: null, receivedAt: 1500, response: { status: 200, body: JSON.stringify(CREATE_OK) }
    })
    assert.equal(d.next, 'extend')
    assert.equal(d.at, 1500)
    assert.equal(d.numbers.leadFloor, 0)
  })

  test('a rejected create stops create_rejected; a deny stops no_reservation', () => {
    let r = Heartbeat.adoptCreate(OPTS, { key: 'k', sentAt: 0, receivedAt: 5, response: { status: 400, body: '{"error":"INVALID_REQUEST"}' } })
    assert.equal(r.decision.reason, 'create_rejected')
    assert.deepEqual(r.heartbeat.pollAction(), { type: 'stop', reason: 'create_rejected' })
    r = Heartbeat.adoptCreate(OPTS, { key: 'k', receivedAt: 5, response: { status: 200, body: '{"decision":"DENY","affected_scopes":[]}' } })
    assert.equal(r.decision.next, 'stop')
  })

  test('bad adopted creates are typed errors with JavaScript names', () => {
    const ok = { key: 'k', sentAt: 0, receivedAt: 10, failure: 'timeout' }
    throwsCode(() => Heartbeat.adoptCreate(OPTS), TypeError, INVALID, /create must be an object/)
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, key: undefined }), TypeError, INVALID, /create\.key is required/)
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, key: 5 }), TypeError, INVALID, /create\.key must be a string/)
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, key: '' }), Error, 'ERR_LEASEBEAT_INVALID_KEY')
    // A key that cannot be a header value: refused up front (issue 25).
    for (const bad of ['k\r\nX-Evil: 1', 'k\n', '\rk', 'k\u0000']) {
      throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, key: bad }), Error, 'ERR_LEASEBEAT_INVALID_KEY', /header value/)
    }
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, receivedAt: undefined }), TypeError, INVALID, /create\.receivedAt is required/)
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, sentAt: 11 }), RangeError, INVALID, /create\.sentAt .* must not be after create\.receivedAt/)
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, sentAt: NaN }), RangeError, INVALID, /create\.sentAt/)
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, failure: undefined }), TypeError, INVALID, /needs a response .* or a failure/)
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, response: { status: 200 } }), TypeError, INVALID, /both response and failure/)
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, failure: 'boom' }), RangeError, INVALID, /create\.failure must be 'timeout', 'connect' or 'reset'/)
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { key: 'k', receivedAt: 1, response: { status: 1000 } }), RangeError, INVALID, /100\.\.=999/)
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, requestBody: 5 }), TypeError, INVALID, /create\.requestBody must be a string, a Buffer, a Uint8Array or an ArrayBuffer/)
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, requestBody: '[1]' }), RangeError, INVALID, /JSON object/)
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, requestBody: '{"idempotency_key":"other"}' }), RangeError, INVALID, /idempotency_key/)
    throwsCode(() => Heartbeat.adoptCreate(OPTS, { ...ok, sent: 0 }), TypeError, INVALID, /unknown property "sent"/)
    throwsCode(() => Heartbeat.adoptCreate({ ...OPTS, ttlMs: 5 }, ok), RangeError, 'ERR_LEASEBEAT_INVALID_CONFIG', /options\.ttlMs/)
  })
})

describe('natural inputs', () => {
  /** A heartbeat whose extend (attempt 2) is in flight at 38500 ms. */
  function inFlight () {
    const { heartbeat: hb } = Heartbeat.adoptCreate(OPTS, { key: 'c', sentAt: 0, receivedAt: 1500, response: { status: 200, body: JSON.stringify(CREATE_OK) } })
    hb.handleSent(2, 38500)
    return hb
  }
  const throttled = (headers) => inFlight().handleResponse(2, { status: 429, headers, body: '' }, 38600)

  test('headers as a fetch Headers, a Map, entries or a plain object, names in any case', () => {
    for (const headers of [
      new Headers({ 'Retry-After': '2' }),
      new Map([['RETRY-AFTER', '2']]),
      [['retry-after', '2']],
      { 'Retry-After': '2' },
      { 'rEtRy-AfTeR': ['2'] },
      new Headers([['content-type', 'text/plain'], ['retry-after', '2']]).entries()
    ]) {
      const d = throttled(headers)
      assert.equal(d.next, 'extend', `${headers.constructor.name}`)
      assert.equal(d.numbers.retryDelay, 2000)
    }
    // A repeated header is two values: unusable (Multiple), as from a plain object.
    assert.equal(throttled([['retry-after', '2'], ['Retry-After', '3']]).reason, 'throttled')
    assert.equal(throttled({ 'retry-after': ['2', '3'] }).reason, 'throttled')
  })

  test('bodies as a string, Buffer, Uint8Array, ArrayBuffer or a view into a larger buffer', () => {
    const text = JSON.stringify({ status: 'ACTIVE', expires_at_ms: 1785585698600, remaining_ttl_ms: 60000 })
    const bytes = new TextEncoder().encode(text)
    const padded = new Uint8Array(bytes.length + 8)
    padded.set(bytes, 4)
    for (const body of [text, Buffer.from(text), bytes, bytes.buffer, padded.subarray(4, 4 + bytes.length)]) {
      const d = inFlight().handleResponse(2, { status: 200, headers: new Headers(), body }, 38600)
      assert.equal(d.outcome, 'success', `${body.constructor.name}`)
      assert.equal(d.remainingTtlMs, 60000)
      assert.equal(d.expiresAtMs, 1785585698600)
    }
  })

  test('messages name the JavaScript methods, never the Rust ones', () => {
    const hb = new Heartbeat(OPTS)
    throwsCode(() => hb.handleFailure(1, 'timeout', 5), Error, 'ERR_LEASEBEAT_NOT_SENT', /call handleSent first/)
    assert.doesNotMatch((() => { try { hb.handleFailure(1, 'timeout', 5) } catch (e) { return e.message } })(), /handle_sent/)
  })
})
