//! JavaScript errors with stable `code` properties.
//!
//! Every failure of the addon is thrown as a JavaScript `Error`, `TypeError`
//! or `RangeError` whose `code` is one of [`ErrorCode`]. Core error kinds map
//! to `ERR_LEASEBEAT_<CORE_CODE_UPPER>` through an exhaustive match, so a new
//! core kind is a compile error here until it is mapped.

use leasebeat as lb;
use napi::bindgen_prelude::*;
use napi_derive::napi;

/// Every `code` an error thrown by this package can carry. The strings are
/// stable; the core's kinds appear as `ERR_LEASEBEAT_<CORE_CODE_UPPER>`.
#[napi(string_enum)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// The configuration is out of range (`RangeError`), e.g. `ttlMs` outside
    /// 1000..=86400000, or `createRequest` containing `idempotency_key`/`ttl_ms`.
    #[napi(value = "ERR_LEASEBEAT_INVALID_CONFIG")]
    InvalidConfig,
    /// An argument has the wrong type (`TypeError`) or is out of range
    /// (`RangeError`): NaN, negative, fractional where an integer is needed,
    /// above 2^53-1 as a number, an HTTP status outside 100..=999, ...
    #[napi(value = "ERR_LEASEBEAT_INVALID_ARGUMENT")]
    InvalidArgument,
    /// An event's time is earlier than the previous event's time (`Error`).
    #[napi(value = "ERR_LEASEBEAT_TIME_WENT_BACKWARDS")]
    TimeWentBackwards,
    /// The attempt named is not the outstanding one: late, duplicate or
    /// unknown (`Error`).
    #[napi(value = "ERR_LEASEBEAT_NOT_OUTSTANDING")]
    NotOutstanding,
    /// An outcome was reported for an attempt never marked sent (`Error`).
    #[napi(value = "ERR_LEASEBEAT_NOT_SENT")]
    NotSent,
    /// The attempt was already marked sent (`Error`).
    #[napi(value = "ERR_LEASEBEAT_ALREADY_SENT")]
    AlreadySent,
    /// The heartbeat has stopped, or the settlement has ended; a stop (an
    /// end) is final (`Error`).
    #[napi(value = "ERR_LEASEBEAT_STOPPED")]
    Stopped,
    /// The key source produced an unusable key (`Error`).
    #[napi(value = "ERR_LEASEBEAT_INVALID_KEY")]
    InvalidKey,
    /// The object was closed with `close()` (`Error`).
    #[napi(value = "ERR_LEASEBEAT_CLOSED")]
    Closed,
    /// A previous call on this object panicked inside the native code; the
    /// object is unusable (`Error`). Never expected: please report it.
    #[napi(value = "ERR_LEASEBEAT_POISONED")]
    Poisoned,
    /// A journal operation failed (`JournalError`, an `Error` with `kind`:
    /// `'symlink'`, `'not_writable'`, `'no_space'`, `'not_a_directory'`,
    /// `'no_directory'`, `'invalid_record'`, `'corrupt'`, `'misplaced'`,
    /// `'not_finished'` or `'io'`, and `path` when one is concerned).
    #[napi(value = "ERR_LEASEBEAT_JOURNAL")]
    Journal,
}

impl ErrorCode {
    /// Every code, in a fixed order.
    pub const ALL: [ErrorCode; 11] = [
        ErrorCode::InvalidConfig,
        ErrorCode::InvalidArgument,
        ErrorCode::TimeWentBackwards,
        ErrorCode::NotOutstanding,
        ErrorCode::NotSent,
        ErrorCode::AlreadySent,
        ErrorCode::Stopped,
        ErrorCode::InvalidKey,
        ErrorCode::Closed,
        ErrorCode::Poisoned,
        ErrorCode::Journal,
    ];

    /// The stable string.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidConfig => "ERR_LEASEBEAT_INVALID_CONFIG",
            ErrorCode::InvalidArgument => "ERR_LEASEBEAT_INVALID_ARGUMENT",
            ErrorCode::TimeWentBackwards => "ERR_LEASEBEAT_TIME_WENT_BACKWARDS",
            ErrorCode::NotOutstanding => "ERR_LEASEBEAT_NOT_OUTSTANDING",
            ErrorCode::NotSent => "ERR_LEASEBEAT_NOT_SENT",
            ErrorCode::AlreadySent => "ERR_LEASEBEAT_ALREADY_SENT",
            ErrorCode::Stopped => "ERR_LEASEBEAT_STOPPED",
            ErrorCode::InvalidKey => "ERR_LEASEBEAT_INVALID_KEY",
            ErrorCode::Closed => "ERR_LEASEBEAT_CLOSED",
            ErrorCode::Poisoned => "ERR_LEASEBEAT_POISONED",
            ErrorCode::Journal => "ERR_LEASEBEAT_JOURNAL",
        }
    }

    /// The code of a core error kind (exhaustive on purpose).
    pub fn of_kind(kind: lb::ErrorKind) -> ErrorCode {
        match kind {
            lb::ErrorKind::InvalidConfig => ErrorCode::InvalidConfig,
            lb::ErrorKind::InvalidArgument => ErrorCode::InvalidArgument,
            lb::ErrorKind::TimeWentBackwards => ErrorCode::TimeWentBackwards,
            lb::ErrorKind::NotOutstanding => ErrorCode::NotOutstanding,
            lb::ErrorKind::NotSent => ErrorCode::NotSent,
            lb::ErrorKind::AlreadySent => ErrorCode::AlreadySent,
            lb::ErrorKind::Stopped => ErrorCode::Stopped,
            lb::ErrorKind::InvalidKey => ErrorCode::InvalidKey,
        }
    }
}

/// The JavaScript class of a thrown error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// `Error`: a state or ordering problem.
    Error,
    /// `TypeError`: a value of the wrong type.
    Type,
    /// `RangeError`: a value of the right type outside its range.
    Range,
}

/// A failure to be thrown into JavaScript.
#[derive(Clone, Debug)]
pub struct Fail {
    class: Class,
    code: ErrorCode,
    message: String,
    journal: Option<Box<JournalInfo>>,
}

/// The properties of a `JournalError` beyond its message.
#[derive(Clone, Debug)]
struct JournalInfo {
    kind: &'static str,
    path: Option<String>,
    quarantined_to: Option<String>,
}

/// The result type of the conversion and call helpers.
pub type R<T> = std::result::Result<T, Fail>;

impl Fail {
    /// A failure of this class and code.
    pub fn new(class: Class, code: ErrorCode, message: impl Into<String>) -> Fail {
        Fail {
            class,
            code,
            message: message.into(),
            journal: None,
        }
    }

    /// A `JournalError`: an `Error` with code `ERR_LEASEBEAT_JOURNAL`, name
    /// `'JournalError'`, `kind` (the core's stable kind name), `path` and
    /// `quarantinedTo` (strings or `null`).
    #[cfg(unix)]
    pub fn journal(e: &lb::journal::JournalError) -> Fail {
        let path = |p: Option<&std::path::Path>| p.map(|p| p.to_string_lossy().into_owned());
        Fail {
            class: Class::Error,
            code: ErrorCode::Journal,
            message: e.to_string(),
            journal: Some(Box::new(JournalInfo {
                kind: e.kind().as_str(),
                path: path(e.path()),
                quarantined_to: path(e.quarantined_to()),
            })),
        }
    }

    /// A `TypeError` with code `ERR_LEASEBEAT_INVALID_ARGUMENT`.
    pub fn ty(message: impl Into<String>) -> Fail {
        Fail::new(Class::Type, ErrorCode::InvalidArgument, message)
    }

    /// A `RangeError` with code `ERR_LEASEBEAT_INVALID_ARGUMENT`.
    pub fn range(message: impl Into<String>) -> Fail {
        Fail::new(Class::Range, ErrorCode::InvalidArgument, message)
    }

    /// The failure of a core error: `RangeError` for invalid configuration
    /// and arguments, `Error` for everything else.
    pub fn core(e: &lb::Error) -> Fail {
        let code = ErrorCode::of_kind(e.kind());
        let class = match e.kind() {
            lb::ErrorKind::InvalidConfig | lb::ErrorKind::InvalidArgument => Class::Range,
            lb::ErrorKind::TimeWentBackwards
            | lb::ErrorKind::NotOutstanding
            | lb::ErrorKind::NotSent
            | lb::ErrorKind::AlreadySent
            | lb::ErrorKind::Stopped
            | lb::ErrorKind::InvalidKey => Class::Error,
        };
        Fail::new(class, code, js_names(e.message()))
    }

    /// Throws this failure as a pending JavaScript exception and returns the
    /// napi error that tells the generated glue an exception is pending.
    pub fn throw(self, env: &Env) -> Error {
        // napi strings are C strings: an interior NUL would truncate.
        let message = self.message.replace('\0', "\\0");
        if let Some(info) = &self.journal {
            match throw_journal(env, &message, info) {
                Ok(()) => return Error::from_status(Status::PendingException),
                Err(e) => return e,
            }
        }
        let code = Some(self.code.as_str());
        let thrown = match self.class {
            Class::Error => env.throw_error(&message, code),
            Class::Type => env.throw_type_error(&message, code),
            Class::Range => env.throw_range_error(&message, code),
        };
        match thrown {
            Ok(()) => Error::from_status(Status::PendingException),
            Err(e) => e,
        }
    }
}

/// Throws a `JournalError` (an `Error` with extra properties).
fn throw_journal(env: &Env, message: &str, info: &JournalInfo) -> Result<()> {
    let mut err = env.create_error(Error::new(Status::GenericFailure, message.to_owned()))?;
    err.set("code", ErrorCode::Journal.as_str())?;
    err.set("name", "JournalError")?;
    err.set("kind", info.kind)?;
    err.set("path", info.path.clone())?;
    err.set("quarantinedTo", info.quarantined_to.clone())?;
    env.throw(err)
}

/// The core's message with its Rust names replaced by the names a JavaScript
/// caller knows (method, option and argument names of this package).
fn js_names(message: &str) -> String {
    const NAMES: [(&str, &str); 15] = [
        ("handle_sent", "handleSent"),
        ("handle_persisted", "handlePersisted"),
        ("handle_persist_failed", "handlePersistFailed"),
        ("release_reason", "options.releaseReason"),
        ("retry.max_attempts", "options.retry.maxAttempts"),
        ("retry.initial_ms", "options.retry.initialMs"),
        ("retry.max_ms", "options.retry.maxMs"),
        ("base_url is", "options.baseUrl is"),
        ("handle_response", "handleResponse"),
        ("handle_failure", "handleFailure"),
        ("poll_action", "pollAction"),
        ("create_request must", "options.createRequest must"),
        ("ttl_ms must be within", "options.ttlMs must be within"),
        ("reservation_id must be", "reservationId must be"),
        ("request_timeout_ms", "options.requestTimeoutMs"),
    ];
    let mut out = message.to_owned();
    for (rust, js) in NAMES {
        out = out.replace(rust, js);
    }
    out
}

/// Runs `f` and throws its failure, if any, into JavaScript.
pub fn run<T>(env: &Env, f: impl FnOnce() -> R<T>) -> Result<T> {
    f().map_err(|fail| fail.throw(env))
}
