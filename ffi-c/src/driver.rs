//! The HTTP driver (cargo feature `driver`, on by default): many heartbeats
//! run over HTTP by the core's driver (`leasebeat::driver`), their events
//! delivered to a C callback on a dispatcher thread this module owns.
//!
//! Threads of one `lb_driver`: the core's timer thread and worker pool, plus
//! one dispatcher thread (`leasebeat-events`) that turns each core event into
//! an `lb_event` and calls the callback with it, in order. The callback is
//! never called from inside another `lb_` call of the caller's threads and
//! never after lb_driver_free() (or lb_driver_shutdown()) returns: both join
//! the dispatcher after the core's threads, so every event is delivered first.

use std::cell::Cell;
use std::ffi::{c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use leasebeat::TransportFailure;
use leasebeat::driver::{
    ApiKey, Driver, DriverConfig, DriverError, Event, JeopardyReason, Outcome,
};
use serde_json::{Map, Value};

use crate::buf::{check_out, copy_text, try_ref, try_str, write_out};
use crate::decision::lb_decision;
use crate::driver_settle::lb_settle_result;
use crate::error::{Fail, guard, lb_status};
use crate::heartbeat::lb_config;
use crate::settlement::{lb_settle_mode, lb_settle_outcome, lb_settlement_decision};
use crate::types::{
    LB_FAILURE_CONNECT, LB_FAILURE_RESET, LB_FAILURE_TIMEOUT, lb_failure, lb_key_use, lb_next,
    lb_stop_reason,
};

/// A lease's name within its driver: 1 for the first lease started, 2 for
/// the next, ... (0 is never a lease id). Not the reservation id, which is
/// unknown until the create succeeds.
pub type lb_lease_id = u64;

/// The event callback given to lb_driver_new(): `user_data` is the pointer
/// given there, `event` is valid only until the callback returns (copy what
/// you need, or keep a decision with lb_decision_clone()).
///
/// It runs on the driver's dispatcher thread, one event at a time, in the
/// order the driver produced them (per lease: decisions, then one
/// `LB_EVENT_KIND_STOPPED` last). It may call lb_driver_start(),
/// lb_driver_start_for_reservation(), lb_driver_cancel(), lb_driver_release(),
/// lb_driver_commit() and every accessor, but not lb_driver_shutdown() or
/// lb_driver_free() (`LB_STATUS_IN_CALLBACK`). While it runs no other event
/// is delivered: keep it short. It must not unwind (no C++ exception, no
/// longjmp out of it).
pub type lb_event_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, event: *const lb_event)>;

/// What a driver event reports.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_event_kind {
    /// The core decided, after an attempt's outcome or a cancel: read the
    /// decision with lb_event_decision().
    Decision = 0,
    /// The lease's heartbeat stopped for good (`stop_reason` says why); the
    /// last event of the lease. Follows the stopping decision.
    Stopped = 1,
    /// The core refused an input the driver gave it (a driver bug or a clock
    /// anomaly): `error_status` and lb_event_error_message() say what. The
    /// lease is then cancelled: a decision and a stopped event follow.
    Error = 2,
    /// `lease_in_jeopardy` (D-15): the lease may lapse on the server before
    /// the driver learns more. `jeopardy` says why (`proven_until_reached`
    /// or `late_beat`), `time_ns` when it was detected, `due_ns` and
    /// `proven_until_ns` the instants involved. Reported the moment it
    /// happens, however loaded the driver is; the lease keeps heartbeating
    /// (more decisions follow).
    Jeopardy = 3,
    /// HP-1: a heartbeat attempt failed, or the heartbeat stopped for a
    /// reason other than a cancel (under every policy). `disposition` says
    /// what follows (`due_ns`: when the retry is due; `stop_reason`: why it
    /// stopped), `outcome`/`http_status`/`failure` what the attempt got,
    /// `time_ns` when; lb_event_json() has the core's class and detail.
    HeartbeatFailure = 4,
    /// A settlement decision (every one, the first included): read it with
    /// lb_event_settlement_decision(); `has_attempt`, `attempt_id`,
    /// `settle_mode`, `settle_attempt_number`, `due_ns`, `attempt_sent_ns`
    /// describe the attempt it answers or marks sent; `outcome`/
    /// `http_status`/`failure` what that attempt got.
    Settlement = 5,
    /// A settlement ended (its last event): `settle_outcome`, `record_kept`;
    /// the whole result with lb_event_settle_result().
    Settled = 6,
    /// A journal replay's findings (lease id 0): lb_event_json() has the
    /// partition, the replayed, busy, quarantined and skipped records.
    Journal = 7,
}

/// What follows a heartbeat failure (`LB_EVENT_KIND_HEARTBEAT_FAILURE`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_hb_disposition {
    /// Not a heartbeat failure event.
    None = 0,
    /// The attempt is retried with the same key, due at `due_ns`.
    RetrySameKey = 1,
    /// A new attempt with a new key follows at `due_ns`.
    Continue = 2,
    /// The heartbeat stopped for good (`stop_reason`).
    Stop = 3,
}

/// Why a lease is in jeopardy (`LB_EVENT_KIND_JEOPARDY`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_jeopardy_reason {
    /// Not a jeopardy event.
    None = 0,
    /// `proven_until_reached`: the driver reached the lease's proven lead
    /// (receipt of its last primary success + that success's `lead_floor`)
    /// without a newer success. On the fallback path (an older server, no
    /// `remaining_ttl_ms`: nothing proven) it is reported right after the
    /// first success, once, with `proven_until_ns` 0.
    ProvenUntilReached = 1,
    /// `late_beat`: a scheduled beat was still not sent at its due time plus
    /// the safety margin (the driver is overloaded or stalled). The first
    /// extension of an adopted reservation is due at once and never late.
    LateBeat = 2,
    /// `create_unresolved`: the lease's create was still unresolved (no
    /// success, no stop) when its first attempt's send instant plus the TTL
    /// passed: the server may hold a reservation expiring unseen. Once per
    /// lease.
    CreateUnresolved = 3,
}

impl lb_jeopardy_reason {
    fn from_core(r: JeopardyReason) -> lb_jeopardy_reason {
        match r {
            JeopardyReason::ProvenUntilReached => lb_jeopardy_reason::ProvenUntilReached,
            JeopardyReason::LateBeat => lb_jeopardy_reason::LateBeat,
            JeopardyReason::CreateUnresolved => lb_jeopardy_reason::CreateUnresolved,
        }
    }
}

/// What produced a decision event.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_event_outcome {
    /// Not a decision event.
    None = 0,
    /// A complete HTTP response (`http_status`).
    Response = 1,
    /// No response: a transport failure (`failure`).
    Failure = 2,
    /// The caller cancelled, or the driver shut down.
    Cancelled = 3,
}

/// The plain fields of a driver event, copied out by lb_event_get().
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_event_info {
    /// Decision, stopped, error, jeopardy, heartbeat failure, settlement,
    /// settled or journal.
    pub kind: lb_event_kind,
    /// The lease the event is about (as returned by lb_driver_start()).
    pub lease_id: lb_lease_id,
    /// True once the reservation id is known; read it with
    /// lb_event_reservation_id().
    pub has_reservation_id: bool,
    /// For `LB_EVENT_KIND_STOPPED`: why. For a decision: its stop reason when
    /// it stops the lease, else `LB_STOP_REASON_NONE`. `NONE` for an error.
    pub stop_reason: lb_stop_reason,
    /// For a decision: what produced it; `LB_EVENT_OUTCOME_NONE` otherwise.
    pub outcome: lb_event_outcome,
    /// The HTTP status when `outcome` is `LB_EVENT_OUTCOME_RESPONSE`, else 0.
    pub http_status: u32,
    /// The failure (`LB_FAILURE_*`) when `outcome` is
    /// `LB_EVENT_OUTCOME_FAILURE`, else 0 (meaningless).
    pub failure: lb_failure,
    /// True when the decision answers an attempt (false for a cancel and for
    /// stopped and error events); then the `attempt_*` fields describe it.
    pub has_attempt: bool,
    /// The core's id of the attempt answered; 0 without one.
    pub attempt_id: u64,
    /// `LB_NEXT_CREATE` or `LB_NEXT_EXTEND` for the attempt answered;
    /// `LB_NEXT_STOP` without one.
    pub attempt_kind: lb_next,
    /// Whether the attempt used a new key or retried the previous one.
    pub attempt_key_use: lb_key_use,
    /// The attempt key's index on this lease (1, 2, ...); 0 without one.
    pub attempt_key_index: u32,
    /// When the attempt was marked sent (driver clock, monotonic ns); 0
    /// without one.
    pub attempt_sent_ns: u64,
    /// When the outcome was observed (decision) or the lease stopped
    /// (stopped), on the driver's monotonic clock in ns (`CLOCK_BOOTTIME` on
    /// Linux); 0 for an error.
    pub time_ns: u64,
    /// For `LB_EVENT_KIND_ERROR`: the core's error kind as a status
    /// (`LB_STATUS_TIME_WENT_BACKWARDS`, ...); `LB_STATUS_OK` otherwise.
    pub error_status: lb_status,
    /// For `LB_EVENT_KIND_JEOPARDY`: why; `LB_JEOPARDY_REASON_NONE` otherwise.
    pub jeopardy: lb_jeopardy_reason,
    /// For a decision answering an attempt: when that attempt was due
    /// (`attempt_sent_ns - due_ns` is its lateness; negative when sent early
    /// by the timer slack). For a jeopardy event: the due time of the
    /// lease's scheduled beat. 0 when there is none.
    pub due_ns: u64,
    /// For a jeopardy event: the lease's proven lead (`proven_until`, driver
    /// clock ns; `UINT64_MAX` is +infinity); 0 when it has none (before the
    /// first success, on the fallback path) and for other events.
    pub proven_until_ns: u64,
    /// For `LB_EVENT_KIND_HEARTBEAT_FAILURE`: what follows; `NONE` otherwise.
    pub disposition: lb_hb_disposition,
    /// For a settlement event: the attempt's endpoint, else the decision's
    /// mode; for a settled event: the mode it ended in.
    pub settle_mode: lb_settle_mode,
    /// For a settlement event: the decision's outcome (`NONE` while it
    /// runs); for a settled event: the final outcome.
    pub settle_outcome: lb_settle_outcome,
    /// For a settlement event with an attempt: its ordinal within its mode
    /// (1-based); 0 otherwise.
    pub settle_attempt_number: u32,
    /// For a settled event: the record stays in the journal (a later replay
    /// settles it).
    pub record_kept: bool,
}

/// One event of a driver (opaque), lent to the callback: valid only while
/// the callback runs. Read it with lb_event_get(), lb_event_decision(),
/// lb_event_reservation_id() and lb_event_error_message().
pub struct lb_event {
    pub(crate) info: lb_event_info,
    pub(crate) reservation_id: Option<String>,
    decision: Option<lb_decision>,
    pub(crate) error_message: Option<String>,
    /// A settlement event's decision.
    pub(crate) settle_decision: Option<lb_settlement_decision>,
    /// A settled event's result.
    pub(crate) settle_result: Option<lb_settle_result>,
    /// The JSON text of a heartbeat failure, settlement, settled or journal
    /// event (lb_event_json()).
    pub(crate) json: Option<String>,
}

pub(crate) fn failure_value(f: TransportFailure) -> lb_failure {
    match f {
        TransportFailure::Timeout => LB_FAILURE_TIMEOUT,
        TransportFailure::Connect => LB_FAILURE_CONNECT,
        TransportFailure::Reset => LB_FAILURE_RESET,
    }
}

impl lb_event {
    pub(crate) fn set_outcome(&mut self, outcome: &Outcome) {
        match *outcome {
            Outcome::Status(s) => {
                self.info.outcome = lb_event_outcome::Response;
                self.info.http_status = u32::from(s);
            }
            Outcome::Failure(f) => {
                self.info.outcome = lb_event_outcome::Failure;
                self.info.failure = failure_value(f);
            }
            Outcome::Cancelled => self.info.outcome = lb_event_outcome::Cancelled,
        }
    }

    pub(crate) fn blank(
        kind: lb_event_kind,
        lease: u64,
        reservation_id: Option<String>,
    ) -> lb_event {
        lb_event {
            info: lb_event_info {
                kind,
                lease_id: lease,
                has_reservation_id: reservation_id.is_some(),
                stop_reason: lb_stop_reason::None,
                outcome: lb_event_outcome::None,
                http_status: 0,
                failure: 0,
                has_attempt: false,
                attempt_id: 0,
                attempt_kind: lb_next::Stop,
                attempt_key_use: lb_key_use::None,
                attempt_key_index: 0,
                attempt_sent_ns: 0,
                time_ns: 0,
                error_status: lb_status::Ok,
                jeopardy: lb_jeopardy_reason::None,
                due_ns: 0,
                proven_until_ns: 0,
                disposition: lb_hb_disposition::None,
                settle_mode: lb_settle_mode::Commit,
                settle_outcome: lb_settle_outcome::None,
                settle_attempt_number: 0,
                record_kept: false,
            },
            reservation_id,
            decision: None,
            error_message: None,
            settle_decision: None,
            settle_result: None,
            json: None,
        }
    }

    pub(crate) fn from_core(event: Event) -> lb_event {
        match event {
            Event::Decision {
                lease,
                reservation_id,
                attempt,
                outcome,
                observed_ns,
                decision,
            } => {
                let mut e = lb_event::blank(lb_event_kind::Decision, lease.0, reservation_id);
                e.info.stop_reason = lb_stop_reason::from_option(decision.stop_reason());
                e.set_outcome(&outcome);
                if let Some(a) = attempt {
                    e.info.has_attempt = true;
                    e.info.attempt_id = a.id;
                    e.info.attempt_kind = lb_next::from_kind(a.kind);
                    // black_box: without it, LLVM derives this value with
                    // arithmetic that valgrind's memcheck cannot follow (it
                    // then reports the field as uninitialised in C).
                    e.info.attempt_key_use =
                        lb_key_use::from_option(Some(std::hint::black_box(a.key_use)));
                    e.info.attempt_key_index = a.key_index;
                    e.info.attempt_sent_ns = a.sent_ns;
                    e.info.due_ns = a.due_ns.unwrap_or(0);
                }
                e.info.time_ns = observed_ns;
                e.decision = Some(lb_decision::from_core(*decision));
                e
            }
            Event::Stopped {
                lease,
                reservation_id,
                reason,
                at_ns,
            } => {
                let mut e = lb_event::blank(lb_event_kind::Stopped, lease.0, reservation_id);
                e.info.stop_reason = lb_stop_reason::from_core(reason);
                e.info.time_ns = at_ns;
                e
            }
            Event::Jeopardy {
                lease,
                reservation_id,
                reason,
                at_ns,
                due_ns,
                proven_until_ns,
            } => {
                let mut e = lb_event::blank(lb_event_kind::Jeopardy, lease.0, reservation_id);
                e.info.jeopardy = lb_jeopardy_reason::from_core(reason);
                e.info.time_ns = at_ns;
                e.info.due_ns = due_ns.unwrap_or(0);
                e.info.proven_until_ns = proven_until_ns.unwrap_or(0);
                e
            }
            Event::Error {
                lease,
                reservation_id,
                error,
            } => {
                let mut e = lb_event::blank(lb_event_kind::Error, lease.0, reservation_id);
                e.info.error_status = lb_status::from_kind(error.kind());
                e.error_message = Some(error.to_string());
                e
            }
            Event::HeartbeatFailure { failure, .. } => {
                crate::driver_settle::failure_event(&failure)
            }
            Event::Settlement {
                lease,
                reservation_id,
                attempt,
                outcome,
                decision,
            } => crate::driver_settle::settlement_event(
                lease.0,
                reservation_id,
                attempt,
                outcome,
                *decision,
            ),
            Event::Settled { lease, result } => {
                crate::driver_settle::settled_event(lease.0, *result)
            }
            Event::Journal { lease, report } => {
                crate::driver_settle::journal_event(lease.0, &report)
            }
        }
    }
}

/// The caller's `user_data`, handed to the dispatcher thread.
struct UserData(*mut c_void);

// SAFETY: the pointer is only passed back to the caller's callback, on the
// dispatcher thread; lb_driver_new() documents that `user_data` must be
// usable from that thread.
unsafe impl Send for UserData {}

/// An HTTP driver (opaque): runs any number of leases (heartbeats) over HTTP
/// and reports their events to the callback given to lb_driver_new().
///
/// Made by lb_driver_new(); stopped by lb_driver_shutdown() and freed by
/// lb_driver_free(). Every function taking a `const lb_driver *` is
/// thread-safe (several threads, the callback included, may call them at
/// once on the same driver).
pub struct lb_driver {
    /// `None` once shut down. An `Arc` only so that release and commit can
    /// run on a short-lived thread (see [`lb_driver::off_thread`]); the
    /// read lock is held meanwhile, so shutdown always holds the last one.
    driver: RwLock<Option<Arc<Driver>>>,
    dispatcher: Mutex<Option<JoinHandle<()>>>,
    /// This driver's number (see [`DISPATCHER_OF`]).
    id: u64,
    /// The largest lease id handed out; the core numbers leases 1, 2, ...
    pub(crate) max_lease: AtomicU64,
}

/// Numbers drivers, so that a dispatcher thread knows whose it is.
static NEXT_DRIVER_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// On a dispatcher thread: the number of its driver; 0 elsewhere. (Not
    /// `std::thread::current()`: on a thread Rust did not start, that
    /// allocates a handle valgrind reports as possibly lost at exit.)
    static DISPATCHER_OF: Cell<u64> = const { Cell::new(0) };
}

fn dispatch(
    driver_id: u64,
    events: Receiver<Event>,
    callback: lb_event_callback,
    user_data: UserData,
) {
    DISPATCHER_OF.with(|d| d.set(driver_id));
    let Some(callback) = callback else { return };
    // Ends when the core's timer thread has exited and dropped its sender,
    // after every event was delivered.
    for event in events.iter() {
        let Ok(event) = catch_unwind(AssertUnwindSafe(|| lb_event::from_core(event))) else {
            continue;
        };
        // SAFETY: the caller's callback, with the caller's `user_data` and an
        // event that stays alive (and unmoved) for the whole call.
        unsafe { callback(user_data.0, &event) };
    }
}

pub(crate) fn driver_error(e: DriverError) -> Fail {
    match e {
        DriverError::Core(e) => Fail::from(e),
        DriverError::ShutDown => shut_down(),
        // Says why, never the URL's credentials (there are none in a URL).
        e @ DriverError::BadUrl(_) => Fail::invalid(e.to_string()),
        // Says why, never the key.
        e @ DriverError::BadApiKey(_) => Fail::invalid(e.to_string()),
        e @ (DriverError::NoReservation(_)
        | DriverError::AlreadySettling(_)
        | DriverError::UnknownLease(_)) => Fail::invalid(e.to_string()),
        DriverError::Journal { kind, message } => Fail::new(
            crate::driver_settle::journal_kind_status(kind),
            format!("journal {kind}: {message}"),
        ),
    }
}

fn shut_down() -> Fail {
    Fail::new(lb_status::ShutDown, "the driver has shut down")
}

impl lb_driver {
    /// Runs `f` with the driver, or refuses when it has shut down.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&Driver) -> Result<T, Fail>) -> Result<T, Fail> {
        let guard = match self.driver.read() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        match guard.as_ref() {
            Some(d) => f(d),
            None => Err(shut_down()),
        }
    }

    /// Runs `f` with the driver on a new thread and joins it: for the
    /// blocking HTTP calls (release, commit). ureq's resolver waits on a
    /// channel, which makes Rust's std allocate a thread handle in the
    /// calling thread's TLS; on a thread the caller owns (e.g. C's main
    /// thread) that handle is never freed (valgrind: "possibly lost"). A
    /// thread started here is joined, and everything it allocated is freed.
    fn off_thread<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Driver) -> T + Send + 'static,
    ) -> Result<T, Fail> {
        let guard = match self.driver.read() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let Some(driver) = guard.as_ref() else {
            return Err(shut_down());
        };
        let driver = Arc::clone(driver);
        let handle = std::thread::Builder::new()
            .name("leasebeat-finalize".into())
            .spawn(move || f(&driver))
            .map_err(|e| Fail::invalid(format!("cannot start a thread: {e}")))?;
        match handle.join() {
            Ok(value) => Ok(value),
            // A panic on that thread: let the caller's guard report it.
            Err(payload) => std::panic::resume_unwind(payload),
        }
    }

    fn in_callback(&self) -> bool {
        DISPATCHER_OF.with(Cell::get) == self.id
    }

    /// Cancels every lease, joins the core's threads, then the dispatcher
    /// (after it delivered every event). Idempotent: returns whether this
    /// call did it (false when the driver had already shut down).
    fn shutdown(&self) -> Result<bool, Fail> {
        if self.in_callback() {
            return Err(Fail::new(
                lb_status::InCallback,
                "lb_driver_shutdown/lb_driver_free must not be called from the event callback \
                 (they wait for the callback's thread)",
            ));
        }
        let driver = match self.driver.write() {
            Ok(mut g) => g.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        let first = driver.is_some();
        if let Some(d) = driver {
            // The only reference left: every `off_thread` call has joined.
            match Arc::try_unwrap(d) {
                Ok(d) => {
                    d.shutdown();
                }
                Err(d) => drop(d),
            }
        }
        let dispatcher = match self.dispatcher.lock() {
            Ok(mut g) => g.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(h) = dispatcher {
            let _ = h.join();
        }
        Ok(first)
    }
}

/// Makes a driver and starts its threads: a timer thread, a pool of at most
/// `max_workers` HTTP worker threads (started on demand) and the dispatcher
/// thread that calls `callback(user_data, event)` for every event.
///
/// `base_url` (NUL-terminated UTF-8) must start with `http://` or `https://`;
/// requests go to `{base_url}/v1/reservations...` (a trailing `/` is
/// ignored; https uses rustls with the webpki roots; no proxy, no redirects).
/// `api_key` (NUL-terminated UTF-8) is sent as `X-Cycles-API-Key`; it is never
/// printed nor put in an error message. `max_workers` must be at least 1.
/// `callback` must not be NULL; `user_data` may be anything (NULL included)
/// and is passed back untouched, from the dispatcher thread: it must be
/// usable there. On success `*out` owns the driver: stop it with
/// lb_driver_shutdown() and/or free it with lb_driver_free().
///
/// Errors: `LB_STATUS_NULL_ARGUMENT`, `LB_STATUS_INVALID_UTF8`,
/// `LB_STATUS_INVALID_ARGUMENT` (the URL's scheme, zero workers, an API key
/// that cannot be an HTTP header value: empty, CR, LF or another control
/// character, non-ASCII, leading/trailing whitespace; the message never
/// contains the key),
/// `LB_STATUS_INVALID_CONFIG` (a thread could not be started).
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_new(
    base_url: *const c_char,
    api_key: *const c_char,
    max_workers: usize,
    callback: lb_event_callback,
    user_data: *mut c_void,
    out: *mut *mut lb_driver,
) -> lb_status {
    guard(|| {
        // SAFETY: NULL or NUL-terminated strings, by the caller's promise.
        let base_url = unsafe { try_str(base_url, "base_url") }?;
        // SAFETY: as above.
        let api_key = unsafe { try_str(api_key, "api_key") }?;
        if callback.is_none() {
            return Err(Fail::null("callback"));
        }
        check_out(out, "out")?;
        if max_workers == 0 {
            return Err(Fail::invalid("max_workers must be at least 1"));
        }
        let mut config = DriverConfig::new(base_url, ApiKey::new(api_key));
        config.max_workers = max_workers;
        new_driver(config, callback, user_data, out)
    })
}

/// Starts a driver from a complete configuration (lb_driver_new(),
/// lb_driver_new_with()); `out` checked by the caller.
pub(crate) fn new_driver(
    config: DriverConfig,
    callback: lb_event_callback,
    user_data: *mut c_void,
    out: *mut *mut lb_driver,
) -> Result<(), Fail> {
    if callback.is_none() {
        return Err(Fail::null("callback"));
    }
    check_out(out, "out")?;
    if config.max_workers == 0 {
        return Err(Fail::invalid("max_workers must be at least 1"));
    }
    let (driver, events) = Driver::new(config).map_err(driver_error)?;
    let user_data = UserData(user_data);
    let id = NEXT_DRIVER_ID.fetch_add(1, Ordering::Relaxed);
    let dispatcher = std::thread::Builder::new()
        .name("leasebeat-events".into())
        .spawn(move || dispatch(id, events, callback, user_data))
        .map_err(|e| {
            Fail::new(
                lb_status::InvalidConfig,
                format!("cannot start the dispatcher thread: {e}"),
            )
        })?;
    // (On that error `driver` is dropped here, which joins its threads.)
    let d = Box::new(lb_driver {
        driver: RwLock::new(Some(Arc::new(driver))),
        dispatcher: Mutex::new(Some(dispatcher)),
        id,
        max_lease: AtomicU64::new(0),
    });
    // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
    unsafe { write_out(out, Box::into_raw(d)) };
    Ok(())
}

pub(crate) fn start(
    driver: *const lb_driver,
    cfg: *const lb_config,
    reservation_id: Option<*const c_char>,
    opts: *const crate::driver_settle::lb_lease_options,
    out: *mut lb_lease_id,
) -> lb_status {
    guard(|| {
        // SAFETY: `driver` is NULL or a live driver (internally synchronized).
        let d = unsafe { try_ref(driver, "driver") }?;
        // SAFETY: `cfg` is NULL or a live configuration not mutated during the call.
        let cfg = unsafe { try_ref(cfg, "cfg") }?;
        let reservation_id = match reservation_id {
            // SAFETY: NULL or a NUL-terminated string, by the caller's promise.
            Some(p) => Some(unsafe { try_str(p, "reservation_id") }?),
            None => None,
        };
        // SAFETY: `opts` is NULL or live options not mutated during the call.
        let options = unsafe { opts.as_ref() }
            .map(|o| o.to_core())
            .unwrap_or_default();
        check_out(out, "out")?;
        let lease = match cfg.plain_create(reservation_id) {
            Some(config) => {
                d.with(|driver| driver.start_with(config, options).map_err(driver_error))?
            }
            None => {
                let hb = cfg.heartbeat(reservation_id)?;
                d.with(|driver| {
                    driver
                        .start_heartbeat_with(hb, options)
                        .map_err(driver_error)
                })?
            }
        };
        d.max_lease.fetch_max(lease.0, Ordering::SeqCst);
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, lease.0) };
        Ok(())
    })
}

/// Starts a lease: a heartbeat made from `cfg` (a create first, then
/// extensions), run by the driver against its base URL. `*out` receives the
/// lease id; its events (each decision, then one stopped event) go to the
/// callback, possibly before this function returns. `cfg` is only read.
/// The configuration needs a finite `request_timeout_ms`: the driver
/// enforces it on every attempt.
///
/// Errors: `LB_STATUS_INVALID_CONFIG` (e.g. an unbounded request timeout),
/// `LB_STATUS_INVALID_KEY`, `LB_STATUS_SHUT_DOWN`, `LB_STATUS_NULL_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_start(
    driver: *const lb_driver,
    cfg: *const lb_config,
    out: *mut lb_lease_id,
) -> lb_status {
    start(driver, cfg, None, std::ptr::null(), out)
}

/// Starts a lease for a reservation created elsewhere: its first attempt is
/// an immediate extension (see lb_heartbeat_new_for_reservation()).
/// `reservation_id` is NUL-terminated UTF-8 of 1..=128 characters. Otherwise
/// as lb_driver_start().
///
/// Errors: those of lb_driver_start(), `LB_STATUS_INVALID_ARGUMENT` (the
/// reservation id's length), `LB_STATUS_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_start_for_reservation(
    driver: *const lb_driver,
    cfg: *const lb_config,
    reservation_id: *const c_char,
    out: *mut lb_lease_id,
) -> lb_status {
    start(driver, cfg, Some(reservation_id), std::ptr::null(), out)
}

/// Cancels one lease: its `cancelled` decision and stopped event follow on
/// the callback. It does not release the reservation (lb_driver_release()).
/// Cancelling a lease that already stopped, or cancelling twice, is
/// accepted and does nothing more: each lease gets exactly one stopped
/// event. An attempt in flight finishes in the pool and is ignored.
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` (a lease id this driver never
/// returned), `LB_STATUS_SHUT_DOWN`, `LB_STATUS_NULL_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_cancel(driver: *const lb_driver, lease_id: lb_lease_id) -> lb_status {
    on_lease(driver, lease_id, Driver::cancel)
}

/// Runs `op` on lease `lease_id` of `driver`, refusing an id the driver never returned.
fn on_lease(
    driver: *const lb_driver,
    lease_id: lb_lease_id,
    op: fn(&Driver, leasebeat::driver::LeaseHandle) -> Result<(), leasebeat::driver::DriverError>,
) -> lb_status {
    guard(|| {
        // SAFETY: `driver` is NULL or a live driver (internally synchronized).
        let d = unsafe { try_ref(driver, "driver") }?;
        d.with(|driver| {
            if lease_id == 0 || lease_id > d.max_lease.load(Ordering::SeqCst) {
                return Err(Fail::invalid(format!(
                    "unknown lease id {lease_id}: this driver never started it"
                )));
            }
            op(driver, leasebeat::driver::LeaseHandle(lease_id)).map_err(driver_error)
        })
    })
}

/// Drops what the driver keeps of a lease after its heartbeat stopped without
/// a settlement (its reservation id, server and event body: about 100 bytes,
/// kept so that a stopped lease can still be committed or released). A
/// long-running driver that lets leases stop unsettled (cancelled and
/// abandoned, or settled elsewhere) calls this so that it does not grow. A
/// lease still running is cancelled first (its `cancelled` decision and
/// stopped event follow on the callback); a lease whose settlement is in
/// progress is left alone (the driver drops it once the settlement ended);
/// forgetting a lease twice is accepted. Afterwards
/// lb_driver_commit_lease() and lb_driver_release_lease() of it fail with
/// `LB_STATUS_INVALID_ARGUMENT` (unknown lease): forget only a lease whose
/// reservation is settled elsewhere or abandoned on purpose (it then holds
/// its budget until it expires).
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` (a lease id this driver never
/// returned), `LB_STATUS_SHUT_DOWN`, `LB_STATUS_NULL_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_forget(driver: *const lb_driver, lease_id: lb_lease_id) -> lb_status {
    on_lease(driver, lease_id, Driver::forget)
}

/// The outcome of lb_driver_release() or lb_driver_commit(): a response, or
/// a transport failure (neither is an error of the call itself).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_finalize_result {
    /// True when a complete HTTP response arrived (`http_status`); false for
    /// a transport failure (`failure`).
    pub responded: bool,
    /// The HTTP status of the response; 0 without one.
    pub http_status: u32,
    /// The transport failure (`LB_FAILURE_*`) when `responded` is false;
    /// 0 otherwise (meaningless).
    pub failure: lb_failure,
}

/// The answer of a settlement, in the shape of the old single-attempt result: the HTTP status
/// that decided, or (no response decided: transport failures until exhausted) the kind of the
/// last transport failure.
fn finalize_result(r: &leasebeat::driver::SettleResult) -> lb_finalize_result {
    match r.status {
        Some(status) => lb_finalize_result {
            responded: true,
            http_status: u32::from(status),
            failure: 0,
        },
        None => {
            let detail = r
                .decisions
                .iter()
                .rev()
                .find_map(|d| d.detail.as_deref())
                .unwrap_or("");
            let failure = [
                TransportFailure::Connect,
                TransportFailure::Reset,
                TransportFailure::Timeout,
            ]
            .into_iter()
            .find(|f| detail.contains(f.as_str()))
            .unwrap_or(TransportFailure::Timeout);
            lb_finalize_result {
                responded: false,
                http_status: 0,
                failure: failure_value(failure),
            }
        }
    }
}

/// Runs a settlement of a reservation the driver does not heartbeat and waits for its end.
fn settle_blocking(
    d: &lb_driver,
    start: impl FnOnce(&Driver) -> Result<leasebeat::driver::Settling, leasebeat::driver::DriverError>
    + Send
    + 'static,
) -> Result<lb_finalize_result, Fail> {
    let result = d.off_thread(move |driver| start(driver).map(|s| s.wait()))?;
    match result {
        Ok(Some(r)) => Ok(finalize_result(&r)),
        Ok(None) => Err(shut_down()),
        Err(e) => Err(driver_error(e)),
    }
}

/// Releases a reservation, on the calling thread, as a settlement (ST-9, SP-1):
/// `POST {base_url}/v1/reservations/{reservation_id}/release` with `reason` (NUL-terminated
/// UTF-8, or NULL for none), one idempotency key for every attempt, retried on timeouts,
/// resets, 5xx and 429 as the core decides (at most 5 attempts, each bounded by the driver's
/// settlement budget), not journaled. Blocks until the outcome is final. Cancel the lease
/// first (lb_driver_cancel()). The deciding answer (an HTTP status such as 200, or the last
/// transport failure when none answered) goes to `*out`. For the full outcome (code, key,
/// decisions) use lb_driver_release_reservation().
///
/// Errors: `LB_STATUS_NULL_ARGUMENT`, `LB_STATUS_INVALID_UTF8`, `LB_STATUS_INVALID_ARGUMENT`
/// (a reservation id the protocol cannot carry), `LB_STATUS_SHUT_DOWN`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_release(
    driver: *const lb_driver,
    reservation_id: *const c_char,
    reason: *const c_char,
    out: *mut lb_finalize_result,
) -> lb_status {
    guard(|| {
        // SAFETY: `driver` is NULL or a live driver (internally synchronized).
        let d = unsafe { try_ref(driver, "driver") }?;
        // SAFETY: NULL or a NUL-terminated string, by the caller's promise.
        let id = unsafe { try_str(reservation_id, "reservation_id") }?;
        let reason = if reason.is_null() {
            None
        } else {
            // SAFETY: non-NULL, NUL-terminated by the caller's promise.
            Some(unsafe { try_str(reason, "reason") }?)
        };
        check_out(out, "out")?;
        let (id, reason) = (id.to_owned(), reason.map(str::to_owned));
        let result = settle_blocking(d, move |driver| {
            driver.release_reservation(&id, reason.as_deref())
        })?;
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, result) };
        Ok(())
    })
}

/// Commits a reservation, on the calling thread, as a journaled settlement (ST-1..ST-8,
/// J-1): `POST {base_url}/v1/reservations/{reservation_id}/commit` with `actual_json`
/// (NUL-terminated UTF-8 JSON, an Amount object such as `{"unit":"TOKENS","amount":42}`),
/// written to the driver's journal before it leaves, one idempotency key for every attempt,
/// retried as the core decides, the `Retry-After` of a 429 honoured (this call then blocks
/// that long, at most an hour). No event fallback: a reservation the driver does not
/// heartbeat has no subject/action here, so an expired one ends `expired_unrecorded` with its
/// record kept (use lb_driver_commit_reservation() with an event body for the fallback).
/// Blocks until the outcome is final; the deciding answer goes to `*out`.
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` (`actual_json` is not a JSON object, or an id the
/// protocol cannot carry), `LB_STATUS_NULL_ARGUMENT`, `LB_STATUS_INVALID_UTF8`,
/// `LB_STATUS_SHUT_DOWN`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_commit(
    driver: *const lb_driver,
    reservation_id: *const c_char,
    actual_json: *const c_char,
    out: *mut lb_finalize_result,
) -> lb_status {
    guard(|| {
        // SAFETY: `driver` is NULL or a live driver (internally synchronized).
        let d = unsafe { try_ref(driver, "driver") }?;
        // SAFETY: NULL or a NUL-terminated string, by the caller's promise.
        let id = unsafe { try_str(reservation_id, "reservation_id") }?;
        // SAFETY: as above.
        let actual = unsafe { try_str(actual_json, "actual_json") }?;
        check_out(out, "out")?;
        let actual: Map<String, Value> = serde_json::from_str(actual)
            .map_err(|e| Fail::invalid(format!("actual_json is not a JSON object: {e}")))?;
        let id = id.to_owned();
        let usage = leasebeat::driver::Usage::new(Value::Object(actual));
        let result = settle_blocking(d, move |driver| driver.commit_reservation(&id, usage, None))?;
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, result) };
        Ok(())
    })
}

/// Shuts the driver down: cancels every running lease (each gets its
/// `cancelled` decision and stopped event), waits for the attempts in
/// flight (each bounded by its request timeout), joins the timer and worker
/// threads, then lets the dispatcher deliver every remaining event and joins
/// it. When it returns, the callback has been called for the last time.
/// Later calls on the driver (but lb_driver_free()) return
/// `LB_STATUS_SHUT_DOWN`, a second lb_driver_shutdown() included (it does
/// nothing else). Another thread may be calling the `const lb_driver *`
/// functions meanwhile.
///
/// Errors: `LB_STATUS_SHUT_DOWN` (already shut down; nothing is done),
/// `LB_STATUS_IN_CALLBACK` when called from the event callback (nothing is
/// done), `LB_STATUS_NULL_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_shutdown(driver: *mut lb_driver) -> lb_status {
    guard(|| {
        // SAFETY: `driver` is NULL or a live driver (internally synchronized).
        let d = unsafe { try_ref(driver.cast_const(), "driver") }?;
        if d.shutdown()? {
            Ok(())
        } else {
            Err(shut_down())
        }
    })
}

/// Test hook, not for production use: while `hold` is true the driver sends
/// nothing (no create, no beat), as if its timer were stalled, but keeps
/// running its jeopardy checks; setting it back to false sends every held
/// beat at once. Tests use it to prove that `LB_EVENT_KIND_JEOPARDY` comes
/// before a lease can lapse on the server.
///
/// Errors: `LB_STATUS_SHUT_DOWN`, `LB_STATUS_NULL_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_hold_sends_for_testing(
    driver: *const lb_driver,
    hold: bool,
) -> lb_status {
    guard(|| {
        // SAFETY: `driver` is NULL or a live driver (internally synchronized).
        let d = unsafe { try_ref(driver, "driver") }?;
        d.with(|driver| driver.hold_sends_for_testing(hold).map_err(driver_error))
    })
}

/// Shuts the driver down as lb_driver_shutdown() does (if not done yet),
/// then frees it: every thread it started is joined and the callback is
/// never called again once this returns. NULL is a no-op. No other call on
/// the driver may run or follow. Called from the event callback it does
/// nothing (it would wait for itself) and sets the last error
/// (`LB_STATUS_IN_CALLBACK`).
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_free(driver: *mut lb_driver) {
    let _ = guard(|| {
        if driver.is_null() {
            return Ok(());
        }
        {
            // SAFETY: a non-NULL `driver` came from lb_driver_new() and is
            // freed once, by the caller's promise.
            let d = unsafe { &*driver };
            let _ = d.shutdown()?;
        }
        // SAFETY: as above; every thread that used it has been joined.
        drop(unsafe { Box::from_raw(driver) });
        Ok(())
    });
}

fn with_event(event: *const lb_event, f: impl FnOnce(&lb_event) -> Result<(), Fail>) -> lb_status {
    guard(|| {
        // SAFETY: `event` is NULL or the event lent to a running callback.
        let e = unsafe { try_ref(event, "event") }?;
        f(e)
    })
}

/// Copies the plain fields of an event into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_event_get(event: *const lb_event, out: *mut lb_event_info) -> lb_status {
    with_event(event, |e| {
        check_out(out, "out")?;
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, e.info) };
        Ok(())
    })
}

/// Writes the event's decision into `*out`, or NULL for a stopped or error
/// event. The decision is lent: valid only while the callback runs, never to
/// be freed; read it with the `lb_decision_*` functions (e.g.
/// lb_decision_get(), lb_decision_json()) or keep a copy with
/// lb_decision_clone().
#[unsafe(no_mangle)]
pub extern "C" fn lb_event_decision(
    event: *const lb_event,
    out: *mut *const lb_decision,
) -> lb_status {
    with_event(event, |e| {
        check_out(out, "out")?;
        let d = e
            .decision
            .as_ref()
            .map_or(std::ptr::null(), |d| d as *const lb_decision);
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, d) };
        Ok(())
    })
}

/// Copies the reservation id into `buf` as a NUL-terminated string (empty
/// while unknown: `has_reservation_id` false). Buffer convention of
/// lb_heartbeat_attempt_key().
#[unsafe(no_mangle)]
pub extern "C" fn lb_event_reservation_id(
    event: *const lb_event,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_event(event, |e| {
        let text = e.reservation_id.as_deref().unwrap_or("");
        // SAFETY: `buf` is NULL or writable for `buf_len` bytes; `out_needed`
        // is NULL (checked inside) or writable.
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Copies an error event's message (`"<code>: <what>"`, from the core) into
/// `buf` as a NUL-terminated string; empty for other events. Buffer
/// convention of lb_heartbeat_attempt_key().
#[unsafe(no_mangle)]
pub extern "C" fn lb_event_error_message(
    event: *const lb_event,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_event(event, |e| {
        let text = e.error_message.as_deref().unwrap_or("");
        // SAFETY: as in lb_event_reservation_id().
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// The stable string of an event kind: `"decision"`, `"stopped"`,
/// `"error"`, `"lease_in_jeopardy"`, `"heartbeat_failure"`, `"settlement"`,
/// `"settled"`, `"journal"`; `"unknown"` for other values. Static;
/// do not free.
#[unsafe(no_mangle)]
pub extern "C" fn lb_event_kind_str(kind: i32) -> *const c_char {
    crate::error::guard_str(
        || {
            [
                lb_event_kind::Decision,
                lb_event_kind::Stopped,
                lb_event_kind::Error,
                lb_event_kind::Jeopardy,
                lb_event_kind::HeartbeatFailure,
                lb_event_kind::Settlement,
                lb_event_kind::Settled,
                lb_event_kind::Journal,
            ]
            .into_iter()
            .find(|k| *k as i32 == kind)
            .map_or(&b"unknown\0"[..], |k| match k {
                lb_event_kind::Decision => b"decision\0",
                lb_event_kind::Stopped => b"stopped\0",
                lb_event_kind::Error => b"error\0",
                lb_event_kind::Jeopardy => b"lease_in_jeopardy\0",
                lb_event_kind::HeartbeatFailure => b"heartbeat_failure\0",
                lb_event_kind::Settlement => b"settlement\0",
                lb_event_kind::Settled => b"settled\0",
                lb_event_kind::Journal => b"journal\0",
            })
        },
        b"unknown\0",
    )
}

/// The stable string of a jeopardy reason: `"proven_until_reached"`,
/// `"late_beat"`, `"create_unresolved"`; `"none"` for `LB_JEOPARDY_REASON_NONE`, `"unknown"` for
/// other values. Static; do not free.
#[unsafe(no_mangle)]
pub extern "C" fn lb_jeopardy_reason_str(reason: i32) -> *const c_char {
    crate::error::guard_str(
        || match reason {
            0 => &b"none\0"[..],
            1 => b"proven_until_reached\0",
            2 => b"late_beat\0",
            3 => b"create_unresolved\0",
            _ => b"unknown\0",
        },
        b"unknown\0",
    )
}
