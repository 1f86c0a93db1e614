//! # leasebeat
//!
//! The one audited lease-heartbeat scheduler for Cycles reservations.
//!
//! A Cycles reservation holds budget or action authority until a
//! server-authoritative expiry; long work keeps it alive with
//! `POST /v1/reservations/{id}/extend`. This crate decides *when* to extend,
//! when to retry with the same idempotency key, and when to stop, exactly as
//! the protocol's HEARTBEAT GUIDANCE prescribes. It is sans-IO: it never reads
//! a clock, opens a socket or spawns a thread. The caller feeds it monotonic
//! nanosecond timestamps and raw HTTP outcomes; it answers with the next
//! [`Action`] and a [`Decision`] carrying the numbers behind it.
//!
//! * [`Heartbeat`] is the per-reservation state machine.
//! * [`arith`] holds the arithmetic alone, as pure functions.
//! * [`schema`] holds the response checks (HB-18, P-1; ST-2, ST-7).
//! * [`Settlement`] is the per-reservation settlement state machine (commit,
//!   the expired-commit event fallback, release; rules ST-/SP- of
//!   [`docs/settlement-contract.md`](https://github.com/leasebeat/leasebeat/blob/main/docs/settlement-contract.md)), and [`SettlementRecord`] its durable
//!   record in runcycles Python 0.5.3's journal layout.
//!
//! Rule ids such as HB-15, D-15 or P-3 in this documentation are those of the
//! heartbeat contract the crate implements,
//! [`docs/heartbeat-contract.md`](https://github.com/leasebeat/leasebeat/blob/main/docs/heartbeat-contract.md).
//!
//! ## Features
//!
//! * `http` — a ready driver (`driver`): ureq (rustls) transport, one timer
//!   thread and a bounded worker pool that run many heartbeats at once.
//! * `journal` (unix) — the settlement journal (`journal`): durable, atomic per-reservation
//!   files interchangeable with runcycles Python 0.5.3's pending-commit journal.
//! * `testkit` — test tooling that is *not* part of the stable API:
//!   `scenario` (reads and replays the shared scenario vectors) and `sim`
//!   (the reference server's protocol model behind `leasebeat serve`).
//!
//! ## Decisions on points the protocol leaves open
//!
//! The rule ids (HB-, FB-, D-, P-) are those of the project's contract
//! ([`docs/heartbeat-contract.md`](https://github.com/leasebeat/leasebeat/blob/main/docs/heartbeat-contract.md)).
//! Where that contract is silent, this crate
//! decides as follows:
//!
//! * A permanent error code (P-3) stops the heartbeat under *any* non-2xx
//!   status, 1xx and 3xx included; a 2xx is always success or ambiguous first.
//! * HTTP statuses outside 100..=999 are refused as an invalid argument; a
//!   well-formed status outside the 1xx..5xx classes stops with
//!   `unexpected_status`.
//! * A retry counts as the single zero-window retry (HB-27) exactly when the
//!   window it was scheduled from was 0, whether the failure was a 429 or not.
//! * Fallback cadences halve with a floor (`grant / 2`, `ttl / 2`); the
//!   threshold comparisons (0.9, 0.75, 1.25, 1.5) are exact integer
//!   cross-multiplications.
//! * A fallback extension success whose predecessor carried no `expires_at_ms`
//!   (a primary create that sent only `remaining_ttl_ms`) measures a grant of 0.
//! * `ttl_ms` must lie in 1000..=86400000 (the create request's range), and
//!   the configured `create_request` may not set `idempotency_key` or `ttl_ms`.
//! * Cancel, and every other event, after a stop is refused with
//!   [`ErrorKind::Stopped`]: a stop is final.
//! * Transport failures and non-success responses carry no timing (P-6);
//!   their observation time alone matters.
//! * Request bodies serialize with members in lexicographic order, e.g.
//!   `{"extend_by_ms":60000,"idempotency_key":"..."}`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod arith;
mod decision;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod driver;
mod error;
mod heartbeat;
#[cfg(all(feature = "journal", unix))]
#[cfg_attr(docsrs, doc(cfg(feature = "journal")))]
pub mod journal;
mod json;
mod keys;
#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod scenario;
pub mod schema;
mod settlement;
#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod sim;

pub use decision::{
    AttemptKind, Decision, KeyUse, Mode, Next, Num, Numbers, OutcomeClass, StopReason, Warning,
    Warnings, ns_to_ms_json,
};
pub use error::{Error, ErrorKind};
pub use heartbeat::{
    Action, AdoptedCreate, Attempt, Config, CreateOutcome, DEFAULT_TTL_MS, DETAIL_CUT_MARKER,
    Heartbeat, MAX_DETAIL_BYTES, MAX_KEY_CHARS, MAX_REMEMBERED_KEYS, MAX_TTL_MS, MIN_TTL_MS,
    Response, ResponseRef, Timing, TransportFailure, permanent_reason,
};
pub use keys::{KeySource, SequentialKeys, UuidV4Keys};
pub use settlement::{
    Endpoint, MAX_BASE_URL_BYTES, MAX_REASON_CHARS, MAX_RESERVATION_ID_CHARS, MAX_RETRY_AFTER_MS,
    Now, RecordMode, RecordUpdate, RetryPolicy, SettleAttempt, SettleClass, SettleMode, SettleNext,
    SettleOutcome, SettleWarning, Settlement, SettlementAction, SettlementConfig,
    SettlementDecision, SettlementRecord, check_reservation_id,
};
