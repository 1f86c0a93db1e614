// Declarations of the runner (runner.js, hand-written).
import type { Attempt, Decision, Heartbeat, Journal, JournalMigrated, JournalQuarantined, JournalSkipped, OutcomeClass, RetryOptions, SettleAttempt, SettleMode, SettleOutcome, Settlement, SettlementDecision, StopReason } from './index.js'

/**
 * The platform's `AbortSignal` (from the DOM library or `@types/node`); a
 * minimal shape when neither is loaded, so that these declarations compile
 * without them.
 */
export type AbortSignalOf = typeof globalThis extends { AbortSignal: { prototype: infer S } } ? S : { readonly aborted: boolean }

/** A decision that stops the heartbeat: what `runHeartbeat` resolves to. */
export type StopDecision = Decision & { next: 'stop'; reason: StopReason }

/**
 * `provenUntilNs` of a lease proven alive forever (receipt plus lead floor
 * overflowed 64 bits): `2n ** 64n - 1n`.
 */
export declare const PROVEN_FOREVER_NS: bigint

/** One request the runner asks a transport to perform. */
export interface TransportRequest {
  /**
   * `'create'` and `'extend'` are the heartbeat's attempts; `'commit'`,
   * `'event'` (`POST /v1/events`, the expired-commit fallback) and
   * `'release'` end the lease (a `Settler`, or `finalize`).
   */
  kind: 'create' | 'extend' | 'release' | 'commit' | 'event'
  /** The reservation (path parameter); `null` for a create. */
  reservationId: string | null
  /** The idempotency key: send it as `X-Idempotency-Key` (it is also the body's `idempotency_key`). */
  key: string
  /** The exact JSON request body; a same-key retry must send exactly these bytes. */
  body: Uint8Array<ArrayBuffer>
  /** The core's attempt: the heartbeat's, a settlement's, or `null` for `finalize`. */
  attempt: Attempt | SettleAttempt | null
}

/** The complete response to one request, as raw as it arrived. */
export interface TransportResponse {
  status: number
  /** A fetch `Headers`, a `Map`, `[name, value]` pairs or a plain object. */
  headers?: Record<string, string | readonly string[]> | Iterable<readonly [string, string]> | null
  /** The complete body. */
  body?: Uint8Array | ArrayBuffer | string | null
}

/**
 * Performs one request with the caller's own HTTP client. It must honour
 * `signal` (aborted at the whole-attempt deadline or when the runner stops),
 * read the complete body, and either resolve to the response or reject with
 * a `TransportError` saying how it failed. Any other rejection counts as
 * `'reset'` (or `'timeout'` once `signal` aborted). The runner enforces the
 * deadline itself too: a transport that ignores `signal` is abandoned at the
 * deadline and its late outcome ignored.
 */
export type Transport = (request: TransportRequest, signal: AbortSignalOf) => Promise<TransportResponse>

/** A transport failure: no HTTP response was observed. */
export declare class TransportError extends Error {
  constructor (kind: 'timeout' | 'connect' | 'reset', message?: string, options?: { cause?: unknown })
  readonly kind: 'timeout' | 'connect' | 'reset'
  readonly code: 'ERR_LEASEBEAT_TRANSPORT'
}

/** The options of the default transport. */
export interface FetchTransportOptions {
  /** The Cycles server's base URL, e.g. `http://127.0.0.1:7878`. */
  baseUrl: string
  /** Sent as `X-Cycles-API-Key`. */
  apiKey: string
  /** A fetch implementation (default: the global `fetch`). */
  fetch?: (input: string, init: { method: string; headers: Record<string, string>; body: Uint8Array<ArrayBuffer>; signal: AbortSignalOf }) => Promise<{ status: number; headers: Iterable<[string, string]>; body?: ReadableStream<Uint8Array> | null; arrayBuffer(): Promise<ArrayBuffer> }>
}

/**
 * The default transport over `fetch`: `POST {baseUrl}/v1/reservations` and
 * `POST {baseUrl}/v1/reservations/{id}/{extend|release|commit}` with
 * `X-Cycles-API-Key` and `X-Idempotency-Key`; reads at most
 * `MAX_BODY_BYTES` of the body (a longer body is not read: the response
 * resolves with its status, headers and an empty body, which the core
 * classifies by status, as with the Rust driver); the whole attempt (connect,
 * request, response, body) is bounded by the signal the runner passes
 * (`AbortSignal.timeout` of the remaining attempt time); failures become
 * `TransportError`s (`'timeout'` once the signal aborted, `'connect'` for a
 * refused/unresolvable connection, `'reset'` otherwise).
 */
export declare function fetchTransport (options: FetchTransportOptions): Transport

/** The largest response body `fetchTransport` reads: 1 MiB (1,048,576 bytes). */
export declare const MAX_BODY_BYTES: number

/** The `lease_in_jeopardy` event (D-15). */
export interface JeopardyEvent {
  event: 'lease_in_jeopardy'
  /**
   * `'proven_until_reached'`: the lease reached its `provenUntil` without a
   * newer success (also at once, once, after the first success on the
   * fallback path, whose decisions carry no `provenUntil`: an older server's
   * answers prove nothing); `'late_beat'`: a scheduled beat went out later
   * than its due time by more than the safety margin.
   */
  cause: 'proven_until_reached' | 'late_beat'
  reservationId: string | null
  /** When it was noticed, in ms on the runner's clock. */
  at: number
  /** For `'proven_until_reached'`: the instant reached (ms); absent on the fallback path. */
  provenUntil?: number
  /** For `'late_beat'`: the beat's due time (ms) and how late it went out. */
  due?: number
  lateMs?: number
}

/** The outcome of the release or commit settled after the stop (`finalize`). */
export interface FinalizeResult {
  kind: 'release' | 'commit'
  reservationId: string
  /** The settlement's one key; `null` when it could not start (`error`). */
  key: string | null
  /** The last HTTP status, or `null` when no response came. */
  status: number | null
  /** Why the settlement could not start (a bad commit body, a journal that cannot open), else `null`. */
  error: unknown
  /** How the settlement ended (`'committed'`, `'released'`, `'exhausted'`, ...), `null` with `error`. */
  outcome: SettleOutcome | null
  /** The whole settlement result, `null` with `error`. */
  result: SettleResult | null
}

/** The options of `runHeartbeat`. */
export interface RunOptions {
  /** The caller's HTTP client; default: `fetchTransport({ baseUrl, apiKey })`. */
  transport?: Transport
  /** For the default transport: the server's base URL. */
  baseUrl?: string
  /** For the default transport: the API key. */
  apiKey?: string
  /**
   * Stops the runner when aborted, at any moment (twice is harmless): the
   * heartbeat is cancelled at once, an attempt in flight is aborted and its
   * late outcome ignored.
   */
  signal?: AbortSignalOf
  /** Every decision (each carries `reservationId`), the final stop included. */
  onDecision?: (decision: Decision) => void
  /** `lease_in_jeopardy` (D-15), reported at once. The runner keeps heartbeating. */
  onJeopardy?: (event: JeopardyEvent) => void
  /**
   * After the stop, release the reservation (`'release'`) or commit it
   * (`{ commit: { actual: { unit, amount }, ... } }`) through a `Settlement`
   * (one key, retries, the event fallback; a commit journaled first) and the transport,
   * unless the server already ended it (finalized, not found) or none was
   * created. After `expired` it is sent all the same: a server may accept it
   * for a grace period after expiry; its answer goes to `onFinalize`.
   * Default: `null` (leave it).
   */
  finalize?: 'release' | { commit: Record<string, unknown> } | null
  /** The outcome of that release or commit. */
  onFinalize?: (result: FinalizeResult) => void
  /**
   * The journal of a `finalize` commit: `{ dir?, tenant? }` (default `{}`:
   * `CYCLES_JOURNAL_DIR`, else `~/.runcycles/commit-journal`) or `false`.
   */
  journal?: { dir?: string; tenant?: string | null } | false
  /** Partition that journal by tenant. */
  tenant?: string | null
  /**
   * The monotonic clock of the heartbeat: every time the heartbeat saw
   * before (e.g. an adopted create's `sentAt`/`receivedAt`) must come from
   * it. Default: `performance.now` (ms).
   */
  clock?: () => number | bigint
}

/**
 * Runs the heartbeat until it stops, and resolves to the stop decision.
 *
 * It sends each attempt when due (early by the measured timer slack of the
 * event loop), marks it sent, performs it through the transport with the
 * whole-attempt deadline `sent + requestTimeoutMs` enforced (fired early by
 * the detection slack so that a timeout is observed no later than the
 * deadline), feeds every outcome to the core and reports every decision.
 * Nothing blocks the event loop, and every timer is `unref`'d: the runner
 * never keeps a process alive on its own. Throws a `TypeError` for bad
 * options; rejects only if the core refuses an event (a bug).
 */
export declare function runHeartbeat (heartbeat: Heartbeat, options?: RunOptions): Promise<StopDecision>

/** The event loop's current measured timer slack in ms (0.2 .. 20). */
export declare function timerSlack (): number

// ----- settlement through the journal -----

/** A journal failure kind (the core's stable names). */
export type JournalErrorKind = 'not_writable' | 'symlink' | 'no_space' | 'not_a_directory' | 'no_directory' | 'invalid_record' | 'corrupt' | 'misplaced' | 'not_finished' | 'io'

/**
 * What a `Journal` throws for what the file system refuses (code
 * `ERR_LEASEBEAT_JOURNAL`). `err instanceof JournalError` holds for the
 * errors the native addon throws.
 */
export declare class JournalError extends Error {
  constructor (kind: JournalErrorKind, message?: string, options?: { cause?: unknown; path?: string | null; quarantinedTo?: string | null })
  readonly code: 'ERR_LEASEBEAT_JOURNAL'
  readonly kind: JournalErrorKind
  /** The path concerned, if any. */
  readonly path: string | null
  /** Where a corrupt record was renamed to, if it was. */
  readonly quarantinedTo: string | null
}

/** How one settlement ended (or stopped: `outcome` `null` after `Settler.close`). */
export interface SettleResult {
  reservationId: string
  /** The settlement's one idempotency key (ST-1). */
  key: string
  mode: SettleMode
  /** `null` only when the settler was closed first (the record stays on disk). */
  outcome: SettleOutcome | null
  /** `committed`, `applied` (event fallback) or `released`. */
  ok: boolean
  /** The last decision's error code and HTTP status, if any. */
  code: string | null
  status: number | null
  /** The durable record stays on disk for a later replay (J-5). */
  recordKept: boolean
  /** Every decision of the settlement, in order. */
  decisions: SettlementDecision[]
  lastDecision: SettlementDecision
  /** A failure of `journal.finish` (the record stays), else `null`. */
  journalError: Error | null
}

/** What the replay on start did (`Settler.replayed`, `onReplay`). */
export interface ReplayReport {
  /** One result per record of this partition settled by this process. */
  settled: SettleResult[]
  /** Records another worker or process is settling (J-6). */
  busy: string[]
  /** Records renamed aside (J-4): never replayed, never deleted. */
  quarantined: JournalQuarantined[]
  /** Legacy-named records migrated (J-8). */
  migrated: JournalMigrated[]
  /** Files left alone, with why. */
  skipped: JournalSkipped[]
}

/** The options of `new Settler(options)`. */
export interface SettlerOptions {
  /** The server (records are partitioned by it; replay settles only its records). */
  baseUrl: string
  /** The API key (the default transport's; names the partition, hashed, when no tenant is given; never stored). */
  apiKey?: string
  /** Partition by tenant: a rotated API key finds the same records. */
  tenant?: string | null
  /** The caller's HTTP client (it must also handle `kind: 'event'`); default: `fetchTransport({ baseUrl, apiKey })`. */
  transport?: Transport
  /**
   * The journal: `{ dir?, tenant? }` (default `{}`: `CYCLES_JOURNAL_DIR`,
   * else `~/.runcycles/commit-journal`), an open `Journal`, or `false` to
   * opt out (nothing durable: a crash loses the usage).
   */
  journal?: { dir?: string; tenant?: string | null } | Journal | false
  /** The settlements' retry policy; default the core's (4 attempts, 500 ms .. 30 s backoff). */
  retry?: RetryOptions
  /** Per-request timeout (ms) of a settlement attempt. Default 10000. */
  requestTimeoutMs?: number
  /** Replay the partition on start (default `true`). */
  replay?: boolean
  /** Every settlement decision. */
  onDecision?: (event: { reservationId: string; decision: SettlementDecision }) => void
  /** The replay report, once every replayed settlement ended. Without it, quarantines are process warnings. */
  onReplay?: (report: ReplayReport) => void
  /** The monotonic clock (ms number or ns bigint). Default `performance.now`. */
  clock?: () => number | bigint
}

/**
 * Settles reservations through the core's `Settlement` and the durable
 * `Journal` of one server and principal: the record is written before the
 * first request leaves (J-1), retries reuse the one key, `Retry-After`
 * floors are persisted, an expired commit falls back to an event when
 * subject and action are known. Replays its partition on start, in the
 * background (`replayed`). Its timers never keep the process alive: await
 * the results or `flush(timeoutMs)` before exiting; what is unresolved stays
 * on disk for the next start.
 */
export declare class Settler {
  constructor (options: SettlerOptions)
  readonly baseUrl: string
  /** The journal, `null` when opted out. */
  readonly journal: Journal | null
  /** How many settlements are being driven now (the replay included). */
  readonly pending: number
  /** The replay on start (resolved at once with empty lists when disabled). */
  readonly replayed: Promise<ReplayReport>
  /** Drives `settlement` to its end. */
  settle (settlement: Settlement, hooks?: { onDecision?: (d: SettlementDecision) => void }): Promise<SettleResult>
  /**
   * Commits `actual` (`{ unit, amount }`) on `reservationId`, journaled
   * first. `subject` and `action` enable the expired-commit event fallback.
   * Throws a `TypeError`/`RangeError` at once for what the core refuses.
   */
  commit (reservationId: string, actual: Record<string, unknown> | null | undefined, extra?: {
    metrics?: Record<string, unknown>
    metadata?: Record<string, unknown>
    subject?: Record<string, unknown> | null
    action?: Record<string, unknown> | null
    onDecision?: (d: SettlementDecision) => void
  }): Promise<SettleResult>
  /** Releases `reservationId` (work that used nothing; retried with one key, not journaled). */
  release (reservationId: string, reason?: string | null, hooks?: { onDecision?: (d: SettlementDecision) => void }): Promise<SettleResult>
  /**
   * Waits at most `timeoutMs` for every settlement in flight (J-7);
   * `pending` is how many still run (their records stay on disk).
   */
  flush (timeoutMs: number): Promise<{ pending: number }>
  /** Stops driving: settlements in flight stop where they are, records stay, claims are released. */
  close (): void
}

/** HP-1: the heartbeat failure policy of a lease. */
export type HeartbeatPolicy = 'warn' | 'cancel' | 'fail_on_finalize'

/** One heartbeat failure or stop (HP-1), reported whatever the policy. */
export interface HeartbeatFailureEvent {
  event: 'heartbeat_failure'
  reservationId: string | null
  /** What happens next: a retry with the same key or a new one, or the heartbeat stopped. */
  disposition: 'retry_same_key' | 'retry_new_key' | 'stop'
  /** The stop reason when `disposition` is `'stop'`. */
  reason: StopReason | null
  outcome: OutcomeClass
  policy: HeartbeatPolicy
  decision: Decision
}

/**
 * The heartbeat failure(s) of a lease: the reason of its aborted `signal`
 * under `'cancel'`, the rejection of `commit`/`release` under
 * `'fail_on_finalize'` (after the settlement ran: `settlement`).
 */
export declare class HeartbeatFailureError extends Error {
  readonly code: 'ERR_LEASEBEAT_HEARTBEAT_FAILED'
  readonly failures: HeartbeatFailureEvent[]
  readonly reservationId: string | null
  readonly settlement: SettleResult | null
}

/** The options of `startLease`. */
export interface LeaseOptions extends Omit<RunOptions, 'finalize' | 'onFinalize'> {
  /** The settler to settle through; default: one made from baseUrl/apiKey/transport, `journal`, `tenant`, `retry` (it replays on start). */
  settler?: Settler
  /** For the default settler: `{ dir?, tenant? }`, or `false` to opt out of the journal. */
  journal?: { dir?: string; tenant?: string | null } | false
  /** For the default settler: partition the journal by tenant. */
  tenant?: string | null
  /** For the default settler: the settlements' retry policy. */
  retry?: RetryOptions
  /** HP-1 (default `'warn'`). */
  policy?: HeartbeatPolicy
  /** Every heartbeat failure or stop; default: a process warning (`LeasebeatHeartbeatWarning`). */
  onHeartbeatFailure?: (event: HeartbeatFailureEvent) => void
  /** Every decision of the lease's settlement. */
  onSettlementDecision?: (decision: SettlementDecision) => void
  /** The event fallback's subject and action; default: the create request's. */
  subject?: Record<string, unknown>
  action?: Record<string, unknown>
}

/** A running lease (`startLease`). */
export interface Lease {
  /** Aborted (reason: `HeartbeatFailureError`) under policy `'cancel'` when the heartbeat stops on its own. Give it to the work. */
  readonly signal: AbortSignalOf
  /** The reservation id once the create succeeded; rejects if the heartbeat stops before. */
  readonly ready: Promise<string>
  /** The heartbeat's stop decision. */
  readonly stopped: Promise<StopDecision>
  readonly settler: Settler
  readonly policy: HeartbeatPolicy
  readonly reservationId: string | null
  /** Every heartbeat failure so far. */
  readonly heartbeatFailures: HeartbeatFailureEvent[]
  /**
   * Settles the lease with its actual usage: journaled, then committed (the
   * heartbeat keeps beating until a decision says `stopHeartbeat`, ST-11).
   * `null`/`undefined` actual: outcome `'no_actual'`, nothing sent, the
   * lease still held (release it). Rejects with a `TypeError`/`RangeError`
   * for bad input (nothing settled), and under `'fail_on_finalize'` with a
   * `HeartbeatFailureError` after the settlement.
   */
  commit (actual: Record<string, unknown> | null | undefined, extra?: {
    metrics?: Record<string, unknown>
    metadata?: Record<string, unknown>
    subject?: Record<string, unknown>
    action?: Record<string, unknown>
  }): Promise<SettleResult>
  /** Releases the lease (work that used nothing). */
  release (reason?: string | null): Promise<SettleResult>
  /** Stops the heartbeat (cancelled) without settling; resolves to the stop decision. */
  stop (): Promise<StopDecision>
}

/**
 * Starts the heartbeat of one lease and returns its handle at once. The
 * work runs beside it (give it `lease.signal`) and ends it with
 * `lease.commit(actual, { metrics, metadata })` or `lease.release(reason)`.
 * Throws a `TypeError` for bad options, a `JournalError` when the default
 * settler's journal cannot be opened.
 */
export declare function startLease (heartbeat: Heartbeat, options?: LeaseOptions): Lease
