// An SDK-style adoption against the reference server: the test performs the
// create itself with fetch, hands it to Heartbeat.adoptCreate, runs a few
// beats with the sans-IO API, releases, and reads the server's log: one
// create, exactly the beats the core asked for (no extra, priming
// extension), the keys it chose, and no lapse.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { randomUUID } from 'node:crypto'

import { Heartbeat } from 'leasebeat'
import { startServer, createBody, API_KEY } from './serve.mjs'

const TTL_MS = 4000
const TIMEOUT_MS = 1000
const BEATS = 3

async function post (url, key, body) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-cycles-api-key': API_KEY, 'x-idempotency-key': key },
    body,
    signal: AbortSignal.timeout(TIMEOUT_MS)
  })
  return { res, body: new Uint8Array(await res.arrayBuffer()) }
}

test('an adopted create costs no extra extension (server log)', async () => {
  const server = await startServer(['--max-lead-ms', String(TTL_MS)])
  try {
    // The SDK's own create.
    const createKey = randomUUID()
    const requestBody = createBody(createKey, TTL_MS)
    const sentAt = performance.now()
    const { res, body } = await post(`${server.url}/v1/reservations`, createKey, requestBody)
    const receivedAt = performance.now()
    assert.equal(res.status, 200)

    const { heartbeat: hb, decision: first } = Heartbeat.adoptCreate(
      { ttlMs: TTL_MS, requestTimeoutMs: TIMEOUT_MS },
      { key: createKey, sentAt, receivedAt, requestBody, response: { status: res.status, headers: res.headers, body } }
    )
    assert.equal(first.outcome, 'success')
    assert.equal(first.next, 'extend')
    assert.ok(first.numbers.nextDelay > 0, 'the first beat waits: nothing is extended at once')
    assert.ok(first.provenUntil > receivedAt)
    assert.equal(typeof first.expiresAtMs, 'number')
    assert.equal(first.remainingTtlMs > 0, true)
    const id = hb.reservationId
    assert.match(id, /^rsv-/)

    const keys = []
    for (let beat = 0; beat < BEATS; beat++) {
      const action = hb.pollAction()
      assert.equal(action.type, 'send')
      if (action.type !== 'send') break
      const a = action.attempt
      const wait = a.dueMs - performance.now()
      if (wait > 0) await sleep(wait)
      hb.handleSent(a.id, performance.now())
      const r = await post(`${server.url}/v1/reservations/${id}/extend`, a.key, a.body)
      const d = hb.handleResponse(a.id, { status: r.res.status, headers: r.res.headers, body: r.body }, performance.now())
      assert.equal(d.outcome, 'success', d.detail ?? '')
      assert.equal(d.next, 'extend')
      keys.push(a.key)
    }
    hb.cancel(performance.now())
    const releaseKey = randomUUID()
    const rel = await post(`${server.url}/v1/reservations/${id}/release`, releaseKey, JSON.stringify({ idempotency_key: releaseKey }))
    assert.equal(rel.res.status, 200)

    const creates = server.requests('create')
    const extends_ = server.requests('extend')
    assert.equal(creates.length, 1)
    assert.equal(creates[0].header_key, createKey)
    assert.deepEqual(extends_.map((e) => e.header_key), keys, 'exactly the beats the core asked for, with its keys')
    assert.equal(new Set([createKey, ...keys]).size, BEATS + 1, 'every beat a new key')
    assert.ok(extends_.every((e) => e.status === 200 && e.reservation_id === id))
    assert.equal(server.requests('release').length, 1)
    assert.deepEqual(server.lapses(), [])
  } finally {
    await server.close()
  }
})
