// The runner over fetch: one lease kept alive while some work runs, then
// released. Not run in CI (it needs a server):
//
//   leasebeat serve --bind 127.0.0.1:7878 &
//   CYCLES_BASE_URL=http://127.0.0.1:7878 CYCLES_API_KEY=dev node examples/runner.mjs
//
// For a create your SDK performed itself, build the heartbeat with
// Heartbeat.adoptCreate(options, { key, sentAt, receivedAt, response,
// requestBody }) (times from performance.now()) and run it the same way.
import { setTimeout as sleep } from 'node:timers/promises'
import { Heartbeat, runHeartbeat } from 'leasebeat'

const baseUrl = process.env.CYCLES_BASE_URL ?? 'http://127.0.0.1:7878'
const apiKey = process.env.CYCLES_API_KEY ?? 'dev'

const ac = new AbortController()
process.once('SIGINT', () => ac.abort())

const heartbeat = new Heartbeat({
  ttlMs: 60_000,
  requestTimeoutMs: 10_000,
  createRequest: {
    subject: { tenant: 'acme' },
    action: { kind: 'llm.completion', name: 'example' },
    estimate: { unit: 'TOKENS', amount: 1000 }
  }
})

const lease = runHeartbeat(heartbeat, {
  baseUrl,
  apiKey,
  signal: ac.signal,
  finalize: 'release',
  onDecision: (d) => console.log(d.reservationId, d.next, d.next === 'stop' ? d.reason : d.at, d.expiresAtMs),
  onJeopardy: (e) => console.error('lease_in_jeopardy', e.reservationId, e.cause),
  onFinalize: (r) => console.log(r.kind, r.reservationId, r.status ?? r.error)
})

// The work the lease protects (it also keeps the process alive: the runner's
// timers never do on their own).
await Promise.race([sleep(Number(process.env.WORK_MS ?? 90_000)), lease])
ac.abort()
const stop = await lease
console.log('stopped:', stop.reason)
