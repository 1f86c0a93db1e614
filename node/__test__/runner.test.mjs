// The runner (runHeartbeat) against `leasebeat serve` on 127.0.0.1, started
// by each test; every test reads the server's log (the keys used, the calls
// answered) and checks that no lease lapsed unreported. No assertion is
// about wall time: only about what the server and the core saw.
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'
import { setMaxListeners } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'

import { Heartbeat, runHeartbeat, fetchTransport, TransportError, PROVEN_FOREVER_NS, timerSlack } from 'leasebeat'
import { startServer, createBody, API_KEY } from './serve.mjs'
import { randomUUID } from 'node:crypto'

const CREATE_REQUEST = {
  subject: { tenant: 'acme' },
  action: { kind: 'llm.completion', name: 'runner-test' },
  estimate: { unit: 'TOKENS', amount: 1000 }
}

/** A heartbeat that creates its own lease: ttl 4000 beats about every second. */
function lease (ttlMs = 4000, requestTimeoutMs = 1000) {
  return new Heartbeat({ ttlMs, requestTimeoutMs, createRequest: CREATE_REQUEST })
}

/** Runs `hb`, aborting after `extends_` extension decisions; collects what was reported. */
async function runFor (server, hb, { extendsBeforeStop = 3, finalize = 'release', transport, ttlAbort } = {}) {
  const ac = new AbortController()
  const decisions = []
  const jeopardy = []
  const finals = []
  let extendsSeen = 0
  const stop = await runHeartbeat(hb, {
    ...(transport ? { transport } : { baseUrl: server.url, apiKey: API_KEY }),
    signal: ac.signal,
    finalize,
    onDecision: (d) => {
      decisions.push(d)
      if (d.outcome === 'success' && hb.attempt?.kind === 'extend' && decisions.length > 1) extendsSeen++
      if (extendsSeen >= extendsBeforeStop) ac.abort()
    },
    onJeopardy: (e) => jeopardy.push(e),
    onFinalize: (r) => finals.push(r)
  })
  void ttlAbort
  return { stop, decisions, jeopardy, finals }
}

/** The keys of the extension requests the server saw, in order. */
function extendKeys (server) {
  return server.requests('extend').map((e) => e.header_key)
}

/** Every request's header key equals its body's idempotency_key. */
function keysMatchBodies (server) {
  for (const e of server.requests()) {
    if (e.endpoint === null) continue
    assert.equal(JSON.parse(e.body).idempotency_key, e.header_key)
  }
}

describe('runHeartbeat against leasebeat serve', () => {
  test('a normal lease: create, beats with new keys, release on stop, no lapse', async () => {
    const server = await startServer(['--max-lead-ms', '4000'])
    try {
      const hb = lease()
      const { stop, decisions, finals } = await runFor(server, hb)
      assert.equal(stop.next, 'stop')
      assert.equal(stop.reason, 'cancelled')
      assert.equal(stop.reservationId, hb.reservationId)
      assert.equal(decisions.at(-1), stop)
      assert.ok(decisions.every((d) => d.reservationId === hb.reservationId))
      const keys = extendKeys(server)
      assert.ok(keys.length >= 3)
      assert.equal(new Set(keys).size, keys.length, 'every beat a new key')
      assert.ok(server.requests('extend').every((e) => e.status === 200))
      assert.equal(server.requests('create').length, 1)
      keysMatchBodies(server)
      assert.deepEqual(finals.map((f) => [f.kind, f.status]), [['release', 200]])
      assert.equal(server.requests('release').length, 1)
      assert.deepEqual(server.lapses(), [])
    } finally {
      await server.close()
    }
  })

  test('after expired the release is sent all the same and the server\'s answer reported (issue 25)', async () => {
    const server = await startServer(['--max-lead-ms', '4000', '--fault', 'extend:2=410:RESERVATION_EXPIRED'])
    try {
      const hb = lease()
      const { stop, finals } = await runFor(server, hb, { extendsBeforeStop: 10 })
      assert.equal(stop.reason, 'expired')
      assert.deepEqual(server.requests('release').map((e) => e.reservation_id), [hb.reservationId])
      assert.deepEqual(finals.map((f) => [f.kind, f.status]), [['release', 200]])
    } finally {
      await server.close()
    }
  })

  test('after not_found nothing is released', async () => {
    const server = await startServer(['--max-lead-ms', '4000', '--fault', 'extend:2=404:NOT_FOUND'])
    try {
      const hb = lease()
      const { stop, finals } = await runFor(server, hb, { extendsBeforeStop: 10 })
      assert.equal(stop.reason, 'not_found')
      assert.equal(server.requests('release').length, 0)
      assert.deepEqual(finals, [])
    } finally {
      await server.close()
    }
  })

  test('a lost response: the same key is replayed and answered', async () => {
    const server = await startServer(['--max-lead-ms', '4000', '--fault', 'extend:1=drop'])
    try {
      const hb = lease()
      const { stop, decisions } = await runFor(server, hb, { extendsBeforeStop: 2 })
      assert.equal(stop.reason, 'cancelled')
      const ext = server.requests('extend')
      assert.equal(ext[0].outcome, 'dropped')
      assert.equal(ext[1].header_key, ext[0].header_key, 'the retry reuses the key')
      assert.equal(ext[1].status, 200)
      assert.ok(decisions.some((d) => d.outcome === 'transport_failure' && d.key === 'same'))
      keysMatchBodies(server)
      assert.deepEqual(server.lapses(), [])
    } finally {
      await server.close()
    }
  })

  test('a 5xx burst: same-key retries until a success', async () => {
    const server = await startServer(['--max-lead-ms', '4000', '--fault', 'extend:1-2=503'])
    try {
      const hb = lease()
      const { stop } = await runFor(server, hb, { extendsBeforeStop: 2 })
      assert.equal(stop.reason, 'cancelled')
      const ext = server.requests('extend')
      assert.deepEqual(ext.slice(0, 3).map((e) => e.status), [503, 503, 200])
      assert.equal(new Set(ext.slice(0, 3).map((e) => e.header_key)).size, 1)
      assert.notEqual(ext[3].header_key, ext[0].header_key)
      assert.deepEqual(server.lapses(), [])
    } finally {
      await server.close()
    }
  })

  test('a 429 whose Retry-After fits the window: retried after it, same key', async () => {
    // ttl 8000 with a 3000 ms timeout: the retry window at a beat is about 3 s.
    const server = await startServer(['--max-lead-ms', '8000', '--fault', 'extend:1=429,retry-after=1'])
    try {
      const hb = lease(8000, 3000)
      const { stop, decisions } = await runFor(server, hb, { extendsBeforeStop: 1 })
      assert.equal(stop.reason, 'cancelled')
      const ext = server.requests('extend')
      assert.deepEqual(ext.slice(0, 2).map((e) => e.status), [429, 200])
      assert.equal(ext[1].header_key, ext[0].header_key)
      const throttled = decisions.find((d) => d.outcome === 'throttled')
      assert.equal(throttled.numbers.retryDelay, 1000)
      assert.deepEqual(server.lapses(), [])
    } finally {
      await server.close()
    }
  })

  test('a response slower than the timeout: observed as a timeout in time to retry', async () => {
    const server = await startServer(['--max-lead-ms', '4000', '--fault', 'extend:1=delay=2500'])
    try {
      const hb = lease()
      const { stop, decisions } = await runFor(server, hb, { extendsBeforeStop: 1 })
      assert.equal(stop.reason, 'cancelled', 'the timeout was observed within the budget: the retry window did not run out')
      const timeout = decisions.find((d) => d.outcome === 'transport_failure')
      assert.ok(timeout !== undefined)
      assert.equal(timeout.next, 'extend')
      assert.equal(timeout.key, 'same')
      // The slow answer is logged when the server finishes it, after the retry's.
      await server.until((s) => s.requests('extend').length >= 2)
      const ext = server.requests('extend')
      const slow = ext.find((e) => e.fault !== null)
      const retry = ext.find((e) => e.fault === null)
      assert.equal(retry.header_key, slow.header_key, 'the retry replays the key the slow attempt used')
      assert.equal(retry.status, 200)
      assert.deepEqual(server.lapses(), [])
    } finally {
      await server.close()
    }
  })

  test('the server killed mid-run: the stop is reported before the proven lead runs out', async () => {
    const server = await startServer(['--max-lead-ms', '4000'])
    try {
      const hb = lease()
      const decisions = []
      const jeopardy = []
      let killed = false
      let stopAt = Infinity
      const stop = await runHeartbeat(hb, {
        baseUrl: server.url,
        apiKey: API_KEY,
        onDecision: (d) => {
          decisions.push(d)
          if (d.next === 'stop') stopAt = performance.now()
          if (!killed && d.outcome === 'success' && decisions.length >= 2) {
            killed = true
            server.child.kill('SIGKILL')
          }
        },
        onJeopardy: (e) => jeopardy.push(e)
      })
      assert.ok(killed)
      assert.equal(stop.next, 'stop')
      assert.equal(stop.reason, 'retry_window_exhausted')
      // Reported before the lease could lapse: the stop came before the last
      // proven instant (or a jeopardy event did).
      const lastSuccess = decisions.findLast((d) => d.outcome === 'success')
      const stoppedAt = stopAt
      assert.ok(decisions.filter((d) => d.outcome === 'transport_failure').length >= 1)
      assert.ok(stoppedAt < lastSuccess.provenUntil || jeopardy.length > 0)
      assert.ok(jeopardy.every((e) => e.event === 'lease_in_jeopardy'))
    } finally {
      await server.close()
    }
  })

  test('a stop while an attempt is in flight: cancelled at once, the late outcome ignored', async () => {
    const server = await startServer(['--max-lead-ms', '4000', '--fault', 'extend:1=hold=1500'])
    try {
      const hb = lease()
      const ac = new AbortController()
      const base = fetchTransport({ baseUrl: server.url, apiKey: API_KEY })
      let inFlight = null
      const transport = (request, signal) => {
        const p = base(request, signal)
        if (request.kind === 'extend' && inFlight === null) {
          inFlight = p.catch(() => null)
          // Stop twice while this attempt is in flight.
          setImmediate(() => { ac.abort(); ac.abort() })
        }
        return p
      }
      const decisions = []
      const stop = await runHeartbeat(hb, { transport, signal: ac.signal, finalize: 'release', onDecision: (d) => decisions.push(d) })
      assert.equal(stop.reason, 'cancelled')
      assert.equal(stop.outcome, 'cancelled')
      assert.equal(hb.stopReason, 'cancelled')
      await inFlight // the late outcome arrives (or fails) after the stop: nothing throws
      assert.equal(decisions.filter((d) => d.next === 'stop').length, 1)
      ac.abort() // and once more after the end
      assert.equal(server.requests('release').length, 1)
      assert.deepEqual(server.lapses(), [])
    } finally {
      await server.close()
    }
  })

  test('1,000 leases in one process: every create and beat with its own keys, no unreported lapse', async () => {
    // The reference server answers some hundred requests a second on a loaded
    // machine: the leases start 10 ms apart, with a lease long enough (ttl
    // 30 s, timeout 5 s: first beat about 19 s after each create) for every
    // rtt that load can cause.
    const N = 1000
    const server = await startServer(['--max-lead-ms', '30000'])
    try {
      const ac = new AbortController()
      setMaxListeners(N + 10, ac.signal) // one signal stops every runner
      const beat = new Set() // leases that saw an extension outcome (or stopped)
      const reported = new Set() // create keys of the leases with a reported stop or jeopardy
      let settle
      const allBeat = new Promise((resolve) => { settle = resolve })
      const mark = (i) => {
        if (!beat.has(i)) {
          beat.add(i)
          if (beat.size === N) settle()
        }
      }
      const runs = []
      for (let i = 0; i < N; i++) {
        const hb = new Heartbeat({ ttlMs: 30000, requestTimeoutMs: 5000, createRequest: CREATE_REQUEST })
        const createKey = hb.attempt.key
        runs.push(runHeartbeat(hb, {
          baseUrl: server.url,
          apiKey: API_KEY,
          signal: ac.signal,
          finalize: 'release',
          onDecision: (d) => {
            if (d.next === 'stop') {
              reported.add(createKey)
              mark(i)
            } else if (hb.attempt?.kind === 'extend' && d.outcome !== 'success') {
              mark(i)
            } else if (d.outcome === 'success' && d.numbers.rtt !== undefined && hb.attempt?.keyIndex > 2) {
              mark(i)
            }
          },
          onJeopardy: () => reported.add(createKey)
        }))
        await sleep(10)
      }
      await allBeat
      ac.abort()
      const stops = await Promise.all(runs)
      assert.equal(stops.length, N)
      assert.ok(stops.every((s) => s.next === 'stop'))
      const creates = server.requests('create')
      assert.ok(creates.length >= N)
      const ext = server.requests('extend')
      assert.ok(ext.length > 0)
      keysMatchBodies(server)
      // A key belongs to one lease: never reused across reservations.
      const owner = new Map()
      for (const e of ext) {
        assert.equal(owner.get(e.header_key) ?? e.reservation_id, e.reservation_id)
        owner.set(e.header_key, e.reservation_id)
      }
      // Every lapse (if any: the machine may be too loaded for the server to
      // answer in time) belongs to a lease whose runner reported a stop or
      // jeopardy, found through the key of the create that made it (a lease
      // whose create timed out twice has no reservation id on the client).
      const createKeyOf = new Map()
      for (const c of creates) {
        const m = /"reservation_id":"([^"]+)"/.exec(c.response ?? '')
        if (m) createKeyOf.set(m[1], c.header_key)
      }
      for (const l of server.lapses()) {
        assert.ok(reported.has(createKeyOf.get(l.reservation_id)), `unreported lapse of ${l.reservation_id}`)
      }
      const cancelled = stops.filter((s) => s.reason === 'cancelled').length
      assert.ok(server.requests('release').length >= cancelled)
    } finally {
      await server.close()
    }
  })
})

describe('runHeartbeat on the fallback path (D-15)', () => {
  test('an older server (no remaining_ttl_ms): proven_until_reached at once after the first success, once', async () => {
    const server = await startServer(['--max-lead-ms', '4000', '--omit-remaining'])
    try {
      const hb = lease()
      const ac = new AbortController()
      const seq = []
      const jeopardy = []
      let successes = 0
      const stop = await runHeartbeat(hb, {
        baseUrl: server.url,
        apiKey: API_KEY,
        signal: ac.signal,
        finalize: 'release',
        onDecision: (d) => {
          seq.push(`decision:${d.outcome}`)
          if (d.outcome === 'success' && ++successes >= 3) ac.abort()
        },
        onJeopardy: (e) => {
          seq.push(`jeopardy:${e.cause}`)
          jeopardy.push(e)
        }
      })
      assert.equal(stop.reason, 'cancelled')
      assert.ok(successes >= 3, seq.join(' '))
      const first = seq.indexOf('decision:success')
      const at = seq.flatMap((s, i) => (s.startsWith('jeopardy:') ? [i] : []))
      assert.deepEqual(at, [first + 1], seq.join(' '))
      assert.equal(jeopardy[0].event, 'lease_in_jeopardy')
      assert.equal(jeopardy[0].cause, 'proven_until_reached')
      assert.equal(jeopardy[0].reservationId, hb.reservationId)
      assert.equal(jeopardy[0].provenUntil, undefined)
      assert.ok(server.requests('extend').every((e) => !(e.response ?? '').includes('remaining_ttl_ms')))
    } finally {
      await server.close()
    }
  })

  test('an adopted fallback create: proven_until_reached at once when the runner starts, once', async () => {
    const server = await startServer(['--max-lead-ms', '4000', '--omit-remaining'])
    try {
      const createKey = randomUUID()
      const requestBody = createBody(createKey, 4000)
      const sentAt = performance.now()
      const res = await fetch(`${server.url}/v1/reservations`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-cycles-api-key': API_KEY, 'x-idempotency-key': createKey },
        body: requestBody
      })
      const body = new Uint8Array(await res.arrayBuffer())
      const receivedAt = performance.now()
      const { heartbeat: hb, decision: first } = Heartbeat.adoptCreate(
        { ttlMs: 4000, requestTimeoutMs: 1000 },
        { key: createKey, sentAt, receivedAt, requestBody, response: { status: res.status, headers: res.headers, body } }
      )
      assert.equal(first.outcome, 'success')
      assert.equal(first.provenUntilNs, null)
      const ac = new AbortController()
      const seq = []
      let successes = 0
      await runHeartbeat(hb, {
        baseUrl: server.url,
        apiKey: API_KEY,
        signal: ac.signal,
        finalize: 'release',
        onDecision: (d) => {
          seq.push(`decision:${d.outcome}`)
          if (d.outcome === 'success' && ++successes >= 2) ac.abort()
        },
        onJeopardy: (e) => seq.push(`jeopardy:${e.cause}`)
      })
      assert.equal(seq[0], 'jeopardy:proven_until_reached', seq.join(' '))
      assert.equal(seq.filter((s) => s.startsWith('jeopardy:')).length, 1, seq.join(' '))
    } finally {
      await server.close()
    }
  })
  test('an adopted reservation (forReservation): its on-time first beat is not late', async () => {
    // Its first extension is due "at 0", i.e. at once. Before the fix the
    // runner read 0 as an instant of performance.now() and reported
    // late_beat once the process was older than the safety margin (1 s).
    while (performance.now() < 2500) await sleep(100)
    const server = await startServer(['--max-lead-ms', '4000'])
    try {
      const createKey = randomUUID()
      const res = await fetch(`${server.url}/v1/reservations`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-cycles-api-key': API_KEY, 'x-idempotency-key': createKey },
        body: createBody(createKey, 4000)
      })
      assert.equal(res.status, 200)
      const { reservation_id: id } = await res.json()
      const hb = Heartbeat.forReservation(id, { ttlMs: 4000, requestTimeoutMs: 1000 })
      const ac = new AbortController()
      const jeopardy = []
      let successes = 0
      await runHeartbeat(hb, {
        baseUrl: server.url,
        apiKey: API_KEY,
        signal: ac.signal,
        finalize: 'release',
        onDecision: (d) => { if (d.outcome === 'success' && ++successes >= 2) ac.abort() },
        onJeopardy: (e) => jeopardy.push(e)
      })
      assert.equal(successes, 2)
      assert.deepEqual(jeopardy, [])
      assert.deepEqual(server.lapses(), [])
    } finally {
      await server.close()
    }
  })
})

describe('runHeartbeat without a server', () => {
  test('bad options are TypeErrors', async () => {
    const hb = lease()
    await assert.rejects(runHeartbeat({}), TypeError)
    await assert.rejects(runHeartbeat(hb, { transport: 5 }), /options\.transport must be a function/)
    await assert.rejects(runHeartbeat(hb, { baseUrl: 'ftp://x', apiKey: 'k' }), /baseUrl must be an http\(s\) URL/)
    await assert.rejects(runHeartbeat(hb, {}), /give options\.transport, or options\.baseUrl/)
    await assert.rejects(runHeartbeat(hb, { transport: async () => ({ status: 200 }), sigal: null }), /unknown option "sigal"/)
    await assert.rejects(runHeartbeat(hb, { transport: async () => ({ status: 200 }), finalize: 'yes' }), /finalize/)
    assert.throws(() => new TransportError('boom'), TypeError)
  })

  test('an already aborted signal cancels before sending anything', async () => {
    let calls = 0
    const stop = await runHeartbeat(lease(), { transport: async () => { calls++; return { status: 500 } }, signal: AbortSignal.abort() })
    assert.equal(stop.reason, 'cancelled')
    assert.equal(calls, 0)
  })

  test('transport errors map to timeout, connect and reset; a thrown non-TransportError is a reset', async () => {
    for (const [thrown, want] of [[new TransportError('connect'), 'connect'], [new TransportError('timeout'), 'timeout'], [new Error('bug'), 'reset']]) {
      const failures = []
      const stop = await runHeartbeat(lease(), {
        transport: async () => { throw thrown },
        onDecision: (d) => { if (d.outcome === 'transport_failure') failures.push(d) }
      })
      assert.equal(stop.reason, 'create_failed', want)
      // The create failed (a same-key retry), then its one retry (the stop).
      assert.deepEqual(failures.map((d) => [d.next, d.key]), [['create', 'same'], ['stop', null]], want)
    }
  })

  test('a transport that ignores the signal is abandoned at the deadline (a timeout)', async () => {
    // The runner's timers are unref'd: this test keeps the process alive itself.
    const keepAlive = setInterval(() => {}, 1000)
    const decisions = []
    const stop = await runHeartbeat(new Heartbeat({ ttlMs: 60000, requestTimeoutMs: 50, createRequest: CREATE_REQUEST }), {
      transport: () => new Promise(() => {}), // never settles
      onDecision: (d) => decisions.push(d)
    })
    clearInterval(keepAlive)
    assert.equal(stop.reason, 'create_failed')
    assert.equal(decisions[0].outcome, 'transport_failure')
  })

  test('lease_in_jeopardy: a beat sent late, and the proven lead reached, reported at once', async () => {
    // A fake server: the create proves 5 s (first beat due about 2 s after
    // it); the event loop is then blocked for 5.5 s, so provenUntil passes
    // and the beat goes out late by more than the margin.
    const keepAlive = setInterval(() => {}, 1000)
    const ac = new AbortController()
    const t0 = Date.now()
    const transport = async (request) => {
      if (request.kind === 'create') {
        return { status: 200, body: JSON.stringify({ decision: 'ALLOW', reservation_id: 'r-j', affected_scopes: ['tenant:a'], expires_at_ms: t0 + 5000, remaining_ttl_ms: 5000 }) }
      }
      await new Promise((resolve) => setTimeout(resolve, 200))
      return { status: 200, body: JSON.stringify({ status: 'ACTIVE', expires_at_ms: Date.now() + 5000, remaining_ttl_ms: 5000 }) }
    }
    const jeopardy = []
    let blocked = false
    const stop = await runHeartbeat(new Heartbeat({ ttlMs: 5000, requestTimeoutMs: 1000, createRequest: CREATE_REQUEST }), {
      transport,
      signal: ac.signal,
      onDecision: (d) => {
        if (!blocked && d.outcome === 'success') {
          blocked = true
          const end = performance.now() + 5500
          while (performance.now() < end) { /* block the event loop */ }
        } else if (d.outcome === 'success') {
          ac.abort()
        }
      },
      onJeopardy: (e) => jeopardy.push(e)
    })
    clearInterval(keepAlive)
    assert.equal(stop.reason, 'cancelled')
    // The proven lead passed while onDecision blocked the loop: reported as
    // soon as the loop runs again, before the late beat goes out.
    assert.deepEqual(jeopardy.map((e) => e.cause), ['proven_until_reached', 'late_beat'])
    assert.ok(jeopardy.every((e) => e.event === 'lease_in_jeopardy' && e.reservationId === 'r-j'))
    assert.ok(jeopardy[1].lateMs > 1000)
    assert.ok(jeopardy[0].at >= jeopardy[0].provenUntil)
  })

  test('the measured timer slack stays within its bounds', () => {
    assert.ok(timerSlack() >= 0.2 && timerSlack() <= 20)
    assert.equal(PROVEN_FOREVER_NS, 2n ** 64n - 1n)
  })
})
