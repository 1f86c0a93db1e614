// The Settlement API of the installed `leasebeat` package: shapes, exact big
// integers, typed errors for bad input (nothing sent, nothing lost), the
// record round trip, close(), and calls out of turn.

import { test } from 'node:test'
import assert from 'node:assert/strict'

import { Settlement, settleOutcomes } from 'leasebeat'

const WALL = 1785585600000
const COMMIT = { actual: { unit: 'TOKENS', amount: 900 } }
const EVENT = { subject: { tenant: 'acme' }, action: { kind: 'llm', name: 'x' } }

function commit (extra = {}, now = 0, wall = WALL) {
  return new Settlement({ reservationId: 'r-1', commit: COMMIT, event: EVENT, ...extra }, now, wall)
}

function code (c, cls = Error) {
  return (e) => e instanceof cls && e.code === c
}

test('a commit goes persist, commit, done; the record is the exact file text', () => {
  const s = commit()
  const p = s.pollAction()
  assert.equal(p.type, 'persist')
  assert.equal(p.record.mode, 'commit')
  assert.equal(p.record.notBeforeMs, null)
  assert.equal(p.record.recordedAtMs, WALL)
  assert.match(s.key, /^[0-9a-f-]{36}$/)
  assert.equal(p.record.key, s.key)
  const file = JSON.parse(p.record.json)
  assert.equal(file.version, 1)
  assert.equal(file.commit_body.idempotency_key, s.key)
  assert.equal(file.event_fallback_body.idempotency_key, s.key)
  assert.equal(s.pollTimeout(), null)
  const d = s.handlePersisted(1)
  assert.equal(d.next, 'commit')
  assert.equal(d.at, 1)
  assert.equal(d.atNs, 1_000_000n)
  assert.equal(s.pollTimeout(), 1_000_000n)
  const a = s.pollAction()
  assert.equal(a.type, 'send')
  assert.equal(a.attempt.endpoint, 'commit')
  assert.equal(a.attempt.key, s.key)
  assert.ok(Buffer.isBuffer(a.attempt.body))
  assert.deepEqual(JSON.parse(a.attempt.bodyText), { ...COMMIT, idempotency_key: s.key })
  assert.equal(s.handleSent(a.attempt.id, 2).next, 'wait')
  assert.equal(s.attempt.sentNs, 2_000_000n)
  const done = s.handleResponse(a.attempt.id, { status: 200, headers: { 'content-type': 'application/json' }, body: '{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":900}}' }, 30, WALL + 30)
  assert.equal(done.outcome, 'committed')
  assert.deepEqual(done.record, { type: 'remove' })
  assert.equal(done.stopHeartbeat, true)
  assert.equal(s.outcome, 'committed')
  assert.deepEqual(s.pollAction(), { type: 'done', outcome: 'committed' })
  assert.equal(s.lastDecisionJson, '{"class":"success","heartbeat":"stop","mode":"commit","next":"done","outcome":"committed","record":"remove","status":200}')
  // ERR_LEASEBEAT_STOPPED after the end, and nothing changes.
  assert.throws(() => s.handleFailure(a.attempt.id, 'reset', 40), code('ERR_LEASEBEAT_STOPPED'))
  assert.equal(s.outcome, 'committed')
})

test('amounts are exact: a bigint beyond 2^53 goes into the body digit for digit', () => {
  const amount = 2n ** 53n + 1n
  const s = new Settlement({ reservationId: 'r-1', commit: { actual: { unit: 'TOKENS', amount } }, keyPrefix: 'k' }, 0, WALL)
  assert.match(s.record.json, /"amount":9007199254740993\b/)
  // As raw JSON text too.
  const t = new Settlement({ reservationId: 'r-1', commit: '{"actual":{"unit":"TOKENS","amount":9223372036854775807}}' }, 0, WALL)
  assert.match(t.record.json, /"amount":9223372036854775807\b/)
  const b = new Settlement({ reservationId: 'r-1', commit: Buffer.from('{"actual":{"unit":"TOKENS","amount":1}}') }, 0, WALL)
  assert.equal(b.record.mode, 'commit')
})

test('an actual amount beyond 2^63-1 is refused with a typed error', () => {
  assert.throws(() => new Settlement({ reservationId: 'r-1', commit: { actual: { unit: 'TOKENS', amount: 2n ** 63n } } }, 0, WALL), code('ERR_LEASEBEAT_INVALID_CONFIG', RangeError))
  assert.throws(() => new Settlement({ reservationId: 'r-1', commit: '{"actual":{"unit":"TOKENS","amount":9223372036854775808}}' }, 0, WALL), code('ERR_LEASEBEAT_INVALID_CONFIG', RangeError))
  assert.throws(() => new Settlement({ reservationId: 'r-1', commit: { actual: { unit: 'TOKENS', amount: 2n ** 64n } } }, 0, WALL), code('ERR_LEASEBEAT_INVALID_ARGUMENT', RangeError))
  assert.throws(() => new Settlement({ reservationId: 'r-1', commit: { actual: { unit: 'TOKENS', amount: 1.5 } } }, 0, WALL), code('ERR_LEASEBEAT_INVALID_CONFIG', RangeError))
})

test('bad bodies and ids are typed errors', () => {
  const bad = [
    [{ reservationId: 'r-1', commit: 'not json' }, 'ERR_LEASEBEAT_INVALID_CONFIG', RangeError],
    [{ reservationId: 'r-1', commit: '[1,2]' }, 'ERR_LEASEBEAT_INVALID_CONFIG', RangeError],
    [{ reservationId: 'r-1', commit: { ...COMMIT, idempotency_key: 'mine' } }, 'ERR_LEASEBEAT_INVALID_CONFIG', RangeError],
    [{ reservationId: 'r-1', commit: COMMIT, event: { subject: {} } }, 'ERR_LEASEBEAT_INVALID_CONFIG', RangeError],
    [{ reservationId: 'r\u00001', commit: COMMIT }, 'ERR_LEASEBEAT_INVALID_CONFIG', RangeError],
    [{ reservationId: 'r'.repeat(10_000), commit: COMMIT }, 'ERR_LEASEBEAT_INVALID_CONFIG', RangeError],
    [{ reservationId: '', commit: COMMIT }, 'ERR_LEASEBEAT_INVALID_CONFIG', RangeError],
    [{ reservationId: 'r-1', release: true, commit: COMMIT }, 'ERR_LEASEBEAT_INVALID_CONFIG', RangeError],
    [{ reservationId: 'r-1', commit: COMMIT, releaseReason: 'x' }, 'ERR_LEASEBEAT_INVALID_CONFIG', RangeError],
    [{ reservationId: 'r-1', commit: COMMIT, retry: { maxAttempts: 0 } }, 'ERR_LEASEBEAT_INVALID_CONFIG', RangeError],
    [{ reservationId: 'r-1', commit: COMMIT, retry: { initialMs: 2000, maxMs: 1000 } }, 'ERR_LEASEBEAT_INVALID_CONFIG', RangeError],
    [{ reservationId: 'r-1', commit: COMMIT, retry: { maxAttempts: 2 ** 32 } }, 'ERR_LEASEBEAT_INVALID_ARGUMENT', RangeError],
    [{ reservationId: 'r-1', commit: COMMIT, retry: { tries: 2 } }, 'ERR_LEASEBEAT_INVALID_ARGUMENT', TypeError],
    [{ reservationId: 'r-1' }, 'ERR_LEASEBEAT_INVALID_ARGUMENT', TypeError],
    [{ reservationId: 1, commit: COMMIT }, 'ERR_LEASEBEAT_INVALID_ARGUMENT', TypeError],
    [{ reservationId: 'r-1', commit: COMMIT, colour: 'red' }, 'ERR_LEASEBEAT_INVALID_ARGUMENT', TypeError],
    [{ reservationId: 'r-1', commit: 42 }, 'ERR_LEASEBEAT_INVALID_ARGUMENT', TypeError],
    [{ reservationId: 'r-1', commit: { actual: { unit: 'TOKENS', amount: () => 1 } } }, 'ERR_LEASEBEAT_INVALID_ARGUMENT', TypeError],
    [{ reservationId: 'r-1', commit: COMMIT, release: 'yes' }, 'ERR_LEASEBEAT_INVALID_ARGUMENT', TypeError]
  ]
  for (const [options, c, cls] of bad) {
    assert.throws(() => new Settlement(options, 0, WALL), code(c, cls), JSON.stringify(options, (_, v) => typeof v === 'string' && v.length > 40 ? `${v.slice(0, 8)}...` : v))
  }
  // Slashes are allowed in an id (the caller percent-encodes the path).
  assert.equal(new Settlement({ reservationId: 'a/b/../c', commit: COMMIT }, 0, WALL).reservationId, 'a/b/../c')
})

test('times and wall-clock milliseconds are validated', () => {
  for (const now of [NaN, -1, Infinity, '0', null]) {
    assert.throws(() => commit({}, now), (e) => e.code === 'ERR_LEASEBEAT_INVALID_ARGUMENT', String(now))
  }
  for (const wall of [NaN, -1, 1.5, Infinity, 2 ** 53, '1', null]) {
    assert.throws(() => commit({}, 0, wall), (e) => e.code === 'ERR_LEASEBEAT_INVALID_ARGUMENT', String(wall))
  }
  assert.throws(() => commit({}, 0, -1n), code('ERR_LEASEBEAT_INVALID_ARGUMENT', RangeError))
  // Beyond 2^53 as a bigint: exact, and it comes back as a bigint.
  const big = 2n ** 60n
  const s = commit({}, 0n, big)
  assert.equal(s.record.recordedAtMs, big)
  const s2 = commit({}, 0, 2 ** 53 - 1)
  assert.equal(s2.record.recordedAtMs, 2 ** 53 - 1)
})

test('a Retry-After floor is persisted first, on the wall clock, as a bigint beyond 2^53', () => {
  const wall = 2n ** 60n
  const s = commit({ keyPrefix: 'k-' }, 0n, wall)
  s.handlePersisted(0n)
  const id = s.pollAction().attempt.id
  s.handleSent(id, 0n)
  const d = s.handleResponse(id, { status: 429, headers: [['Retry-After', '7']] }, 10n ** 6n, wall + 1n)
  assert.equal(d.next, 'persist')
  assert.equal(d.class, 'throttled')
  assert.equal(d.notBeforeMs, wall + 7001n)
  assert.equal(d.delayMs, 7000)
  assert.deepEqual(d.record, { type: 'write', mode: 'commit', notBeforeMs: wall + 7001n })
  assert.equal(s.pollAction().record.notBeforeMs, wall + 7001n)
  const next = s.handlePersistFailed('disk full', 2n * 10n ** 6n)
  assert.deepEqual(next.warnings, ['persist_failed'])
  assert.match(next.detail, /disk full/)
  assert.equal(next.next, 'commit')
  assert.equal(next.atNs, 7_001_000_000n)
})

test('a record round-trips through fromRecord with the same key (a restart)', () => {
  const s = commit()
  const json = s.record.json
  for (const record of [json, Buffer.from(json), new Uint8Array(Buffer.from(json)), new TextEncoder().encode(json).buffer]) {
    const r = Settlement.fromRecord(record, 5, WALL + 5, { retry: { maxAttempts: 2 } })
    assert.equal(r.key, s.key)
    assert.equal(r.lastDecision.class, 'restart')
    const a = r.pollAction()
    assert.equal(a.type, 'send')
    assert.equal(a.attempt.endpoint, 'commit')
    assert.equal(a.attempt.dueNs, 5_000_000n)
  }
  const noOptions = Settlement.fromRecord(json, 0, WALL)
  assert.equal(noOptions.mode, 'commit')
})

test('a corrupt or foreign record is refused with a typed error (a journal quarantines it)', () => {
  const bad = ['', '{', '{"version":2}', 'null', JSON.stringify({ version: 1, reservation_id: 'r-1', mode: 'commit', commit_body: { actual: COMMIT.actual }, recorded_at_ms: 0 })]
  for (const record of bad) {
    assert.throws(() => Settlement.fromRecord(record, 0, WALL), code('ERR_LEASEBEAT_INVALID_ARGUMENT', RangeError), record)
  }
  assert.throws(() => Settlement.fromRecord(42, 0, WALL), code('ERR_LEASEBEAT_INVALID_ARGUMENT', TypeError))
  assert.throws(() => Settlement.fromRecord(commit().record.json, 0, WALL, { retry: { maxAttempts: 0 } }), code('ERR_LEASEBEAT_INVALID_CONFIG', RangeError))
  assert.throws(() => Settlement.fromRecord(commit().record.json, 0, WALL, { keyPrefix: 'x' }), code('ERR_LEASEBEAT_INVALID_ARGUMENT', TypeError))
})

test('no actual: done at once, nothing to persist or send (ST-10)', () => {
  const s = new Settlement({ reservationId: 'r-1', commit: null }, 0, WALL)
  assert.equal(s.outcome, 'no_actual')
  assert.deepEqual(s.pollAction(), { type: 'done', outcome: 'no_actual' })
  assert.equal(s.record, null)
  assert.equal(s.key, '')
  assert.equal(s.lastDecision.stopHeartbeat, true)
})

test('a release is due at once, with a reason, and is not journaled', () => {
  const s = new Settlement({ reservationId: 'r-1', release: true, releaseReason: 'unused', keyPrefix: 'rel-' }, 7, WALL)
  assert.equal(s.mode, 'release')
  assert.equal(s.record, null)
  const a = s.pollAction()
  assert.equal(a.type, 'send')
  assert.equal(a.attempt.endpoint, 'release')
  assert.equal(a.attempt.dueNs, 7_000_000n)
  assert.deepEqual(JSON.parse(a.attempt.bodyText), { idempotency_key: 'rel-1', reason: 'unused' })
  s.handleSent(a.attempt.id, 7)
  const d = s.handleResponse(a.attempt.id, { status: 200, body: '{"status":"RELEASED","released":{"unit":"TOKENS","amount":0}}' }, 9, WALL)
  assert.equal(d.outcome, 'released')
  assert.equal(d.record, null)
})

test('calls out of turn are refused and change nothing', () => {
  const s = commit({ keyPrefix: 'k' })
  assert.throws(() => s.handleSent(1, 1), code('ERR_LEASEBEAT_NOT_OUTSTANDING'))
  assert.throws(() => s.handleFailure(1, 'timeout', 1), code('ERR_LEASEBEAT_NOT_OUTSTANDING'))
  s.handlePersisted(5)
  assert.throws(() => s.handlePersisted(6), code('ERR_LEASEBEAT_NOT_OUTSTANDING'))
  assert.throws(() => s.handleSent(1, 4), code('ERR_LEASEBEAT_TIME_WENT_BACKWARDS'))
  assert.throws(() => s.handleResponse(1, { status: 200 }, 6, WALL), code('ERR_LEASEBEAT_NOT_SENT'))
  assert.throws(() => s.handleSent(2, 6), code('ERR_LEASEBEAT_NOT_OUTSTANDING'))
  s.handleSent(1, 6)
  assert.throws(() => s.handleSent(1, 6), code('ERR_LEASEBEAT_ALREADY_SENT'))
  assert.throws(() => s.handleResponse(1, { status: 1000 }, 7, WALL), code('ERR_LEASEBEAT_INVALID_ARGUMENT', RangeError))
  assert.throws(() => s.handleResponse(1, { status: 99 }, 7, WALL), code('ERR_LEASEBEAT_INVALID_ARGUMENT', RangeError))
  assert.throws(() => s.handleFailure(1, 'dns', 7), code('ERR_LEASEBEAT_INVALID_ARGUMENT', RangeError))
  assert.throws(() => s.handleResponse(1, { status: 200, extra: 1 }, 7, WALL), code('ERR_LEASEBEAT_INVALID_ARGUMENT', TypeError))
  assert.equal(s.pollAction().type, 'wait')
  const d = s.handleFailure(1, 'timeout', 8)
  assert.equal(d.next, 'commit')
  assert.equal(d.delayMs, 500)
  assert.equal(s.failures, 1)
  assert.equal(s.key, 'k1')
})

test('close() is idempotent; every later call throws ERR_LEASEBEAT_CLOSED', () => {
  const s = commit()
  assert.equal(s.closed, false)
  s.close()
  s.close()
  assert.equal(s.closed, true)
  assert.throws(() => s.pollAction(), code('ERR_LEASEBEAT_CLOSED'))
  assert.throws(() => s.handlePersisted(1), code('ERR_LEASEBEAT_CLOSED'))
  assert.throws(() => s.key, code('ERR_LEASEBEAT_CLOSED'))
  assert.throws(() => s.lastDecision, code('ERR_LEASEBEAT_CLOSED'))
})

test('settleOutcomes lists every outcome once', () => {
  assert.deepEqual(settleOutcomes(), ['committed', 'applied', 'released', 'rejected', 'auth_failed', 'unclassified', 'exhausted', 'expired_unrecorded', 'no_actual'])
})
