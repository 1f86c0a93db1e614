// An example heartbeat loop for one Cycles reservation, using the global
// fetch of Node.js >= 20 with an AbortSignal.timeout equal to the configured
// per-attempt budget. Not run in CI (it needs a server):
//
//   CYCLES_BASE_URL=http://127.0.0.1:7878 CYCLES_API_KEY=dev node examples/fetch-loop.mjs
//
// (`leasebeat serve` from the CLI is a reference server for exactly this.)
//
// The core decides everything: when to send, with which key and body, and
// when to stop. This loop only performs the I/O it is told to and reports
// what happened, with monotonic times from performance.now().
import { setTimeout as sleep } from 'node:timers/promises'
import { Heartbeat } from 'leasebeat'

const baseUrl = process.env.CYCLES_BASE_URL ?? 'http://127.0.0.1:7878'
const apiKey = process.env.CYCLES_API_KEY ?? 'dev'
const REQUEST_TIMEOUT_MS = 10_000

const hb = new Heartbeat({
  ttlMs: 60_000,
  requestTimeoutMs: REQUEST_TIMEOUT_MS,
  createRequest: {
    subject: { tenant: 'acme' },
    action: { kind: 'llm.completion', name: 'example' },
    estimate: { unit: 'TOKENS', amount: 1000 }
  }
})

// Cancel cleanly on Ctrl-C: the next loop turn sees the stop.
let cancelRequested = false
process.once('SIGINT', () => { cancelRequested = true })

try {
  for (;;) {
    const action = hb.pollAction()
    if (action.type === 'stop') {
      console.log(`stopped: ${action.reason} (reservation ${hb.reservationId})`)
      break
    }
    const attempt = action.attempt
    // Wait until the attempt is due (in small steps, so a cancel is prompt).
    while (!cancelRequested && attempt.dueMs !== Infinity && performance.now() < attempt.dueMs) {
      await sleep(Math.min(1000, attempt.dueMs - performance.now()))
    }
    if (cancelRequested || attempt.dueMs === Infinity) {
      const d = hb.cancel(performance.now())
      console.log('cancelled', d.reservationId)
      break
    }
    const url = attempt.kind === 'create'
      ? `${baseUrl}/v1/reservations`
      : `${baseUrl}/v1/reservations/${encodeURIComponent(hb.reservationId)}/extend`
    hb.handleSent(attempt.id, performance.now())
    let decision
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'X-Cycles-API-Key': apiKey,
          'X-Idempotency-Key': attempt.key
        },
        body: attempt.body,
        // The enforced per-attempt timeout is the configured budget. A timer
        // can fire a little late; a timeout observed after the budget can
        // leave no retry window, so the core stops rather than risk a lapse.
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS)
      })
      const body = new Uint8Array(await res.arrayBuffer())
      decision = hb.handleResponse(attempt.id, {
        status: res.status,
        headers: res.headers,
        body
      }, performance.now())
    } catch (err) {
      // Map the fetch failure to the core's three transport failures.
      const CONNECT = ['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT']
      const failure = err?.name === 'TimeoutError'
        ? 'timeout'
        : CONNECT.includes(err?.cause?.code) ? 'connect' : 'reset'
      decision = hb.handleFailure(attempt.id, failure, performance.now())
    }
    console.log(JSON.stringify({ reservationId: decision.reservationId, ...JSON.parse(hb.lastDecisionJson) }))
  }
} finally {
  hb.close()
}
