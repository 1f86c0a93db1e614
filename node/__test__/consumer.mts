// A small TypeScript consumer of the installed package, type-checked (never
// run) by scripts/test-node.sh with `tsc --noEmit` against index.d.ts.
import {
  Heartbeat,
  primarySchedule,
  parseRetryAfter,
  stopReasons,
  errorCodes,
  msToNs,
  type Action,
  type Attempt,
  type Decision,
  type ErrorCode,
  type ForReservationOptions,
  type HeartbeatOptions,
  type Numbers,
  type ResponseInit,
  type StopReason,
  type TransportFailure
} from 'leasebeat'

/** Exhaustive over the stop reasons: a new reason is a compile error here. */
export function describeStop (reason: StopReason): string {
  switch (reason) {
    case 'lease_too_short':
    case 'retry_window_exhausted':
    case 'no_progress':
    case 'throttled':
      return 'the lease could not be kept safely'
    case 'expired':
    case 'finalized':
    case 'max_extensions':
    case 'tenant_closed':
    case 'not_found':
    case 'rejected':
    case 'unexpected_status':
      return 'the server ended it'
    case 'create_failed':
    case 'create_rejected':
    case 'no_reservation':
      return 'no lease was created'
    case 'cancelled':
      return 'cancelled'
    default: {
      const never: never = reason
      return never
    }
  }
}

export function isLeasebeatError (e: unknown, code: ErrorCode): boolean {
  return e instanceof Error && (e as Error & { code?: unknown }).code === code
}

export function drive (now: () => bigint): Decision | null {
  const options: HeartbeatOptions = { ttlMs: 60000, requestTimeoutMs: null, createRequest: { subject: { tenant: 'acme' } } }
  const hb = new Heartbeat(options)
  const action: Action = hb.pollAction()
  if (action.type === 'stop') {
    describeStop(action.reason)
    return null
  }
  if (action.type !== 'send') return null
  // Narrowed by the discriminant: no `!` and no null check.
  const attempt: Attempt = action.attempt
  const due: bigint | null = attempt.dueNs
  const body: Uint8Array = attempt.body
  void due
  void body
  hb.handleSent(attempt.id, now())
  const response: ResponseInit = { status: 200, headers: { 'retry-after': ['1'] }, body: new Uint8Array(0) }
  const d: Decision = hb.handleResponse(attempt.id, response, performance.now())
  const n: Numbers = d.numbers
  const delay: number | bigint | undefined = n.nextDelay
  void delay
  const at: number | null = d.at
  const atNs: bigint | null = d.atNs
  void at
  void atNs
  if (d.next === 'stop' && d.reason !== null) describeStop(d.reason)
  const failure: TransportFailure = 'timeout'
  const f = hb.handleFailure(attempt.id, failure, now())
  hb.close()
  // @ts-expect-error: not a transport failure
  hb.handleFailure(1, 'boom', 0)
  // @ts-expect-error: times are numbers or bigints
  hb.cancel('now')
  // @ts-expect-error: ttlMs is required
  void new Heartbeat({ requestTimeoutMs: 1000 })
  return f
}

/** A heartbeat for a reservation created elsewhere: it starts by extending it. */
export function existing (reservationId: string): Heartbeat {
  const options: ForReservationOptions = { ttlMs: 60000, requestTimeoutMs: 10000, keyPrefix: 'k' }
  const hb: Heartbeat = Heartbeat.forReservation(reservationId, options)
  const id: string | null = hb.reservationId
  void id
  // @ts-expect-error: the reservation id is a string
  void Heartbeat.forReservation(9, options)
  // @ts-expect-error: nothing is created, so there is no createRequest
  void Heartbeat.forReservation(reservationId, { ...options, createRequest: {} })
  // @ts-expect-error: the options are required
  void Heartbeat.forReservation(reservationId)
  return hb
}

const s = primarySchedule(61500, 1500, 10000, 1500)
export const nextDelay: number | bigint = s.nextDelay
export const retryAfter: number | bigint | null = parseRetryAfter(['2']).ms
export const reasons: StopReason[] = stopReasons()
export const codes: ErrorCode[] = errorCodes()
export const zero: bigint = msToNs(0)

// The settlement: the action union narrows, the decision's fields are typed.
import {
  Settlement,
  settleOutcomes,
  type SettlementAction,
  type SettlementDecision,
  type SettlementOptions,
  type SettleOutcome,
  type RecordUpdate
} from 'leasebeat'

export function settle (reservationId: string): SettleOutcome | null {
  const options: SettlementOptions = {
    reservationId,
    commit: { actual: { unit: 'TOKENS', amount: 900n } },
    event: '{"subject":{"tenant":"acme"},"action":{"kind":"llm","name":"x"}}',
    retry: { maxAttempts: 3 }
  }
  const s = new Settlement(options, performance.now(), Date.now())
  const action: SettlementAction = s.pollAction()
  if (action.type === 'persist') {
    const text: string = action.record.json
    const floor: number | bigint | null = action.record.notBeforeMs
    void text
    void floor
    s.handlePersisted(performance.now())
  } else if (action.type === 'send' || action.type === 'wait') {
    const body: Uint8Array = action.attempt.body
    void body
  }
  const d: SettlementDecision = s.handleFailure(1, 'timeout', 2n)
  const r: RecordUpdate | null = d.record
  if (r !== null && r.type === 'write') {
    const mode: 'commit' | 'event' = r.mode
    void mode
  }
  // @ts-expect-error: a commit needs the wall clock too
  void new Settlement(options, 0)
  // @ts-expect-error: the reservation id is required
  void new Settlement({ commit: null }, 0, 0)
  const restarted = Settlement.fromRecord(s.record?.json ?? '', 0, Date.now(), { retry: { maxMs: 1000 } })
  const all: SettleOutcome[] = settleOutcomes()
  void all
  return restarted.outcome
}

// The journal and the lease handle (startLease, Settler).
import {
  Journal,
  JournalError,
  Settler,
  startLease,
  HeartbeatFailureError,
  type HeartbeatFailureEvent,
  type Lease,
  type SettleResult,
  type JournalReplay
} from 'leasebeat'

export async function leaseConsumer (hb: Heartbeat): Promise<string | null> {
  const j = Journal.open({ dir: '/tmp/j', baseUrl: 'http://127.0.0.1:7878', apiKey: 'k', tenant: 'acme' })
  const replay: JournalReplay = j.replay({ now: performance.now(), wallMs: Date.now(), retry: { maxAttempts: 3 } })
  for (const s of replay.settlements) j.releaseClaim(s.reservationId)
  try {
    j.remove('r-1')
  } catch (e) {
    if (e instanceof JournalError) {
      const k: 'symlink' | 'not_writable' | 'no_space' | 'not_a_directory' | 'no_directory' | 'invalid_record' | 'corrupt' | 'misplaced' | 'not_finished' | 'io' = e.kind
      void k
    }
  }
  const settler = new Settler({ baseUrl: 'http://127.0.0.1:7878', apiKey: 'k', journal: { dir: '/tmp/j' }, onReplay: (r) => void r.quarantined })
  const failures: HeartbeatFailureEvent[] = []
  const lease: Lease = startLease(hb, { baseUrl: 'http://127.0.0.1:7878', apiKey: 'k', settler, policy: 'cancel', onHeartbeatFailure: (e) => failures.push(e) })
  lease.signal.addEventListener('abort', () => {})
  // @ts-expect-error: the policy is one of three names
  void startLease(hb, { baseUrl: 'x', apiKey: 'k', policy: 'ignore' })
  try {
    const r: SettleResult = await lease.commit({ unit: 'TOKENS', amount: 5 }, { metrics: { tokens_input: 1 }, metadata: { run: 'a' } })
    if (r.outcome === 'committed' || r.outcome === 'applied') return r.key
  } catch (e) {
    if (e instanceof HeartbeatFailureError) return e.settlement?.key ?? null
  }
  await settler.flush(1000)
  return (await lease.release('unused')).outcome
}
