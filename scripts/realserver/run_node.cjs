// One lease through Node's runHeartbeat against a Cycles server (the real-server stage).
//
// usage: node run_node.cjs URL API_KEY TTL_MS TIMEOUT_MS EXTENDS release|commit
//
// The entry point node/__test__/runner.test.mjs drives against `leasebeat serve`:
// runHeartbeat with its default fetch transport (baseUrl, apiKey). With EXTENDS > 0 it
// aborts after that many successful extensions; with 0 it runs until the heartbeat stops
// by itself (the server's extension limit). Then it releases or commits (finalize).
// Loads the repository's node/ package; NAPI_RS_NATIVE_LIBRARY_PATH names the addon.
// Prints one JSON line per event with the wall-clock time `t` (ms since the epoch).
'use strict'
const path = require('node:path')
const { Heartbeat, runHeartbeat } = require(path.join(__dirname, '..', '..', 'node'))

const [url, apiKey, ttl, timeout, extendsArg, fin] = process.argv.slice(2)
const extendsWanted = Number(extendsArg)
const emit = (o) => process.stdout.write(JSON.stringify({ ...o, t: Date.now() }, (k, v) => typeof v === 'bigint' ? Number(v) : v) + '\n')
const adopt = process.env.LEASEBEAT_ADOPT_RESERVATION
// LEASEBEAT_ADOPT_RESERVATION=ID: heartbeat that existing reservation (forReservation).
const hb = adopt ? Heartbeat.forReservation(adopt, { ttlMs: Number(ttl), requestTimeoutMs: Number(timeout) }) : new Heartbeat({
  ttlMs: Number(ttl),
  requestTimeoutMs: Number(timeout),
  createRequest: {
    subject: { tenant: 'demo' },
    action: { kind: 'llm.completion', name: 'leasebeat-realserver' },
    estimate: { unit: 'TOKENS', amount: 1000 }
  }
})
const ac = new AbortController()
// runHeartbeat's timers are unref'd (node/README.md): this script's only work is the
// lease, so it keeps the process alive itself until the runner has ended.
const keepAlive = setInterval(() => {}, 1000)
let successes = 0
runHeartbeat(hb, {
  baseUrl: url,
  apiKey,
  signal: ac.signal,
  finalize: fin === 'commit' ? { commit: { actual: { unit: 'TOKENS', amount: 500 } } } : 'release',
  onDecision: (d) => {
    emit({ ev: 'decision', rid: d.reservationId, outcome: d.outcome, next: d.next, reason: d.reason, remaining_ttl_ms: d.remainingTtlMs })
    if (d.outcome === 'success') {
      successes++
      if (extendsWanted && successes === extendsWanted + (adopt ? 0 : 1)) ac.abort()
    }
  },
  onJeopardy: (e) => emit({ ev: 'jeopardy', rid: e.reservationId, cause: e.cause }),
  onFinalize: (r) => emit({ ev: 'finalize', endpoint: r.kind, status: r.status, error: r.error ? String(r.error) : null })
}).then((stop) => {
  emit({ ev: 'stop', rid: stop.reservationId, reason: stop.reason })
  emit({ ev: 'exit' })
  clearInterval(keepAlive)
}, (e) => {
  clearInterval(keepAlive)
  emit({ ev: 'error', error: String(e) })
  process.exitCode = 1
})
