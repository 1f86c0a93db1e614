// Type test (never run): the sans-IO loop over the platform's fetch, checked
// by scripts/test-node.sh with `tsc --noEmit` under TypeScript 5.9 and 6.0
// against the installed index.d.ts, with the DOM library's fetch types.
import { Heartbeat, runHeartbeat, fetchTransport, TransportError, PROVEN_FOREVER_NS, type Decision, type Transport, type StopDecision, type JeopardyEvent } from 'leasebeat'

export async function beatOnce (url: string, apiKey: string): Promise<Decision | null> {
  const { heartbeat, decision } = Heartbeat.adoptCreate(
    { ttlMs: 60000, requestTimeoutMs: 10000 },
    { key: 'sdk-key', sentAt: 0, receivedAt: performance.now(), response: { status: 503, headers: new Headers(), body: new ArrayBuffer(0) } }
  )
  const until: bigint | null = decision.provenUntilNs
  const expires: number | bigint | null = decision.expiresAtMs
  void until
  void expires
  const action = heartbeat.pollAction()
  if (action.type !== 'send') return null
  // `action.attempt` is an Attempt here (no `!`), and its body is a BodyInit.
  const attempt = action.attempt
  heartbeat.handleSent(attempt.id, performance.now())
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-idempotency-key': attempt.key, 'x-cycles-api-key': apiKey },
    body: attempt.body,
    signal: AbortSignal.timeout(10000)
  })
  const body = new Uint8Array(await res.arrayBuffer())
  // A fetch Headers is accepted as it is.
  return heartbeat.handleResponse(attempt.id, { status: res.status, headers: res.headers, body }, performance.now())
}

export function bodies (hb: Heartbeat): void {
  const a = hb.attempt
  if (a === null) return
  const asBlob = new Blob([a.body])
  const request = new Request('http://127.0.0.1/', { method: 'POST', body: a.body })
  void asBlob
  void request
}

/** The runner, typed: options, the stop, and a custom transport over fetch. */
export async function run (hb: Heartbeat): Promise<string> {
  const ac = new AbortController()
  const transport: Transport = async (request, signal) => {
    const res = await fetch(`http://127.0.0.1/${request.kind}`, { method: 'POST', body: request.body, signal })
    if (res.status === 599) throw new TransportError('reset')
    return { status: res.status, headers: res.headers, body: await res.arrayBuffer() }
  }
  const stop: StopDecision = await runHeartbeat(hb, {
    transport,
    signal: ac.signal,
    finalize: 'release',
    onDecision: (d) => { void d.provenUntilNs },
    onJeopardy: (e: JeopardyEvent) => { void e.cause }
  })
  void fetchTransport({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k' })
  const forever: bigint = PROVEN_FOREVER_NS
  void forever
  // @ts-expect-error: finalize is 'release', { commit } or null
  void runHeartbeat(hb, { transport, finalize: 'yes' })
  return stop.reason
}
