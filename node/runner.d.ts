// Declarations of the runner (runner.js, hand-written).
import type { Attempt, Decision, Heartbeat, StopReason } from './index.js'

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
  /** `'create'` and `'extend'` are the heartbeat's attempts; `'release'` and `'commit'` end the lease (`finalize`). */
  kind: 'create' | 'extend' | 'release' | 'commit'
  /** The reservation (path parameter); `null` for a create. */
  reservationId: string | null
  /** The idempotency key: send it as `X-Idempotency-Key` (it is also the body's `idempotency_key`). */
  key: string
  /** The exact JSON request body; a same-key retry must send exactly these bytes. */
  body: Uint8Array<ArrayBuffer>
  /** The core's attempt (`null` for a release or commit). */
  attempt: Attempt | null
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

/** The outcome of the release or commit sent after the stop (`finalize`). */
export interface FinalizeResult {
  kind: 'release' | 'commit'
  reservationId: string
  key: string
  /** The HTTP status, or `null` when the request failed (`error`). */
  status: number | null
  error: unknown
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
   * (`{ commit: { actual: { unit, amount }, ... } }`) through the transport,
   * unless the server already ended it (finalized, not found) or none was
   * created. After `expired` it is sent all the same: a server may accept it
   * for a grace period after expiry; its answer goes to `onFinalize`.
   * Default: `null` (leave it).
   */
  finalize?: 'release' | { commit: Record<string, unknown> } | null
  /** The outcome of that release or commit. */
  onFinalize?: (result: FinalizeResult) => void
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
