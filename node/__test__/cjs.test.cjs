// The CommonJS entry works on its own: require('leasebeat').
const { test } = require('node:test')
const assert = require('node:assert/strict')

const { Heartbeat, stopReasons, primarySchedule, runHeartbeat, fetchTransport, TransportError } = require('leasebeat')

test('require("leasebeat") drives a heartbeat', () => {
  const hb = new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'k' })
  const a = hb.pollAction().attempt
  hb.handleSent(a.id, 0n)
  const d = hb.handleFailure(a.id, 'connect', 10n)
  assert.equal(d.next, 'create')
  assert.equal(d.key, 'same')
  const b = hb.pollAction().attempt
  hb.handleSent(b.id, 20n)
  const s = hb.handleFailure(b.id, 'reset', 30n)
  assert.equal(s.reason, 'create_failed')
  hb.close()
  assert.equal(stopReasons().length, 15)
  assert.equal(primarySchedule(61500, 1500, 10000, 1500).nextDelay, 37000)
})

test('errors are real Error subclasses with a code', () => {
  try {
    new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 10000 }).handleSent(1, NaN)
    assert.fail('no throw')
  } catch (e) {
    assert.ok(e instanceof RangeError)
    assert.ok(e instanceof Error)
    assert.equal(e.code, 'ERR_LEASEBEAT_INVALID_ARGUMENT')
  }
})

test('require("leasebeat") exports the runner too', () => {
  assert.equal(typeof runHeartbeat, 'function')
  assert.equal(typeof fetchTransport({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k' }), 'function')
  assert.equal(new TransportError('reset').kind, 'reset')
})
