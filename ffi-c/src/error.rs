//! Status codes, the thread-local last-error message and the panic boundary.

use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

use leasebeat::{Error, ErrorKind};

use crate::buf::copy_text;

/// The result of every fallible function: `LB_STATUS_OK` (0) or the reason the
/// call was refused. A refused call changes nothing and writes no output
/// (except the needed size on `LB_STATUS_BUFFER_TOO_SMALL`); the thread's
/// last-error message (lb_last_error()) then says what was wrong.
///
/// Values 1..=99 mirror the core's error kinds one to one; values 100..=109
/// are the C layer's own; values 110..=129 mirror the journal's error kinds
/// (`JournalErrorKind`) one to one. The numbers are stable.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_status {
    /// Success.
    Ok = 0,
    /// The configuration is out of range (e.g. `ttl_ms` outside
    /// 1000..=86400000, or a `create_request` that is not a JSON object or sets
    /// `idempotency_key` or `ttl_ms`). Core kind `invalid_config`.
    InvalidConfig = 1,
    /// An argument is out of range (e.g. an HTTP status outside 100..=999, an
    /// unknown failure kind or number name). Core kind `invalid_argument`.
    InvalidArgument = 2,
    /// An event's time is earlier than the previous event's time. Core kind
    /// `time_went_backwards`.
    TimeWentBackwards = 3,
    /// The attempt named is not the outstanding one (late, duplicate or
    /// unknown). Core kind `not_outstanding`.
    NotOutstanding = 4,
    /// An outcome was reported for an attempt that was never marked sent. Core
    /// kind `not_sent`.
    NotSent = 5,
    /// The attempt was already marked sent. Core kind `already_sent`.
    AlreadySent = 6,
    /// The heartbeat has stopped; a stop is final. Core kind `stopped`.
    Stopped = 7,
    /// The key source produced an unusable key (empty, longer than 256
    /// characters, or already used on this lease). Core kind `invalid_key`.
    InvalidKey = 8,
    /// A required pointer argument was NULL.
    NullArgument = 100,
    /// The caller's buffer is too small; the needed size was written to the
    /// size out-parameter.
    BufferTooSmall = 101,
    /// A string argument is not valid UTF-8.
    InvalidUtf8 = 102,
    /// A bug: the library panicked. The panic was caught at the boundary; a
    /// heartbeat that panicked refuses every further call with this status.
    Panic = 103,
    /// The driver has shut down (lb_driver_shutdown() or lb_driver_free()
    /// began): it starts and cancels nothing more.
    ShutDown = 104,
    /// The call is not allowed from inside the driver's event callback:
    /// lb_driver_shutdown() and lb_driver_free() wait for the callback's own
    /// thread to finish.
    InCallback = 105,
    /// A bounded wait ended before what it waited for (lb_settling_wait()).
    TimedOut = 106,
    /// The journal directory (or a record in it) cannot be written: permission
    /// denied, a read-only file system. Journal kind `not_writable`.
    JournalNotWritable = 110,
    /// A symbolic link where the journal expects its directory or a record
    /// (J-3: never followed). Journal kind `symlink`.
    JournalSymlink = 111,
    /// The file system is full (or the quota is exhausted); the previous
    /// record, if any, is intact. Journal kind `no_space`.
    JournalNoSpace = 112,
    /// The journal path (or the partition in it) exists and is not a
    /// directory. Journal kind `not_a_directory`.
    JournalNotADirectory = 113,
    /// No journal directory was given, `CYCLES_JOURNAL_DIR` is unset and
    /// there is no home directory. Journal kind `no_directory`.
    JournalNoDirectory = 114,
    /// The record is not one the journal can take: an empty reservation id,
    /// a missing body. Journal kind `invalid_record`.
    JournalInvalidRecord = 115,
    /// A stored record did not parse or validate (J-4): it was renamed aside
    /// (quarantined). Journal kind `corrupt`.
    JournalCorrupt = 116,
    /// The file under the id's name holds another reservation id; it was left
    /// alone. Journal kind `misplaced`.
    JournalMisplaced = 117,
    /// Any other I/O error of the journal. Journal kind `io`.
    JournalIo = 118,
    /// lb_journal_finish() was given a settlement that has not ended: nothing
    /// was touched. Journal kind `not_finished`.
    JournalNotFinished = 119,
}

impl lb_status {
    /// Every status, in a fixed order.
    pub(crate) const ALL: [lb_status; 26] = [
        lb_status::Ok,
        lb_status::InvalidConfig,
        lb_status::InvalidArgument,
        lb_status::TimeWentBackwards,
        lb_status::NotOutstanding,
        lb_status::NotSent,
        lb_status::AlreadySent,
        lb_status::Stopped,
        lb_status::InvalidKey,
        lb_status::NullArgument,
        lb_status::BufferTooSmall,
        lb_status::InvalidUtf8,
        lb_status::Panic,
        lb_status::ShutDown,
        lb_status::InCallback,
        lb_status::TimedOut,
        lb_status::JournalNotWritable,
        lb_status::JournalSymlink,
        lb_status::JournalNoSpace,
        lb_status::JournalNotADirectory,
        lb_status::JournalNoDirectory,
        lb_status::JournalInvalidRecord,
        lb_status::JournalCorrupt,
        lb_status::JournalMisplaced,
        lb_status::JournalIo,
        lb_status::JournalNotFinished,
    ];

    /// The status of a core error kind. Exhaustive on purpose: a new core
    /// kind does not compile until it is mapped here.
    pub fn from_kind(kind: ErrorKind) -> lb_status {
        match kind {
            ErrorKind::InvalidConfig => lb_status::InvalidConfig,
            ErrorKind::InvalidArgument => lb_status::InvalidArgument,
            ErrorKind::TimeWentBackwards => lb_status::TimeWentBackwards,
            ErrorKind::NotOutstanding => lb_status::NotOutstanding,
            ErrorKind::NotSent => lb_status::NotSent,
            ErrorKind::AlreadySent => lb_status::AlreadySent,
            ErrorKind::Stopped => lb_status::Stopped,
            ErrorKind::InvalidKey => lb_status::InvalidKey,
        }
    }

    /// The stable string: the core's code for core kinds (`"invalid_config"`,
    /// ...), `"journal_"` and the journal's kind for journal errors
    /// (`"journal_no_space"`, ...), `"ok"`, `"null_argument"`,
    /// `"buffer_too_small"`, `"invalid_utf8"`, `"panic"` for the others.
    pub fn as_str(self) -> &'static str {
        match self {
            lb_status::Ok => "ok",
            lb_status::InvalidConfig => ErrorKind::InvalidConfig.code(),
            lb_status::InvalidArgument => ErrorKind::InvalidArgument.code(),
            lb_status::TimeWentBackwards => ErrorKind::TimeWentBackwards.code(),
            lb_status::NotOutstanding => ErrorKind::NotOutstanding.code(),
            lb_status::NotSent => ErrorKind::NotSent.code(),
            lb_status::AlreadySent => ErrorKind::AlreadySent.code(),
            lb_status::Stopped => ErrorKind::Stopped.code(),
            lb_status::InvalidKey => ErrorKind::InvalidKey.code(),
            lb_status::NullArgument => "null_argument",
            lb_status::BufferTooSmall => "buffer_too_small",
            lb_status::InvalidUtf8 => "invalid_utf8",
            lb_status::Panic => "panic",
            lb_status::ShutDown => "shut_down",
            lb_status::InCallback => "in_callback",
            lb_status::TimedOut => "timed_out",
            lb_status::JournalNotWritable => "journal_not_writable",
            lb_status::JournalSymlink => "journal_symlink",
            lb_status::JournalNoSpace => "journal_no_space",
            lb_status::JournalNotADirectory => "journal_not_a_directory",
            lb_status::JournalNoDirectory => "journal_no_directory",
            lb_status::JournalInvalidRecord => "journal_invalid_record",
            lb_status::JournalCorrupt => "journal_corrupt",
            lb_status::JournalMisplaced => "journal_misplaced",
            lb_status::JournalIo => "journal_io",
            lb_status::JournalNotFinished => "journal_not_finished",
        }
    }

    /// The same string, NUL-terminated, for C.
    pub(crate) fn as_cstr(self) -> &'static [u8] {
        match self {
            lb_status::Ok => b"ok\0",
            lb_status::InvalidConfig => b"invalid_config\0",
            lb_status::InvalidArgument => b"invalid_argument\0",
            lb_status::TimeWentBackwards => b"time_went_backwards\0",
            lb_status::NotOutstanding => b"not_outstanding\0",
            lb_status::NotSent => b"not_sent\0",
            lb_status::AlreadySent => b"already_sent\0",
            lb_status::Stopped => b"stopped\0",
            lb_status::InvalidKey => b"invalid_key\0",
            lb_status::NullArgument => b"null_argument\0",
            lb_status::BufferTooSmall => b"buffer_too_small\0",
            lb_status::InvalidUtf8 => b"invalid_utf8\0",
            lb_status::Panic => b"panic\0",
            lb_status::ShutDown => b"shut_down\0",
            lb_status::InCallback => b"in_callback\0",
            lb_status::TimedOut => b"timed_out\0",
            lb_status::JournalNotWritable => b"journal_not_writable\0",
            lb_status::JournalSymlink => b"journal_symlink\0",
            lb_status::JournalNoSpace => b"journal_no_space\0",
            lb_status::JournalNotADirectory => b"journal_not_a_directory\0",
            lb_status::JournalNoDirectory => b"journal_no_directory\0",
            lb_status::JournalInvalidRecord => b"journal_invalid_record\0",
            lb_status::JournalCorrupt => b"journal_corrupt\0",
            lb_status::JournalMisplaced => b"journal_misplaced\0",
            lb_status::JournalIo => b"journal_io\0",
            lb_status::JournalNotFinished => b"journal_not_finished\0",
        }
    }
}

/// A refused call: the status and the message for lb_last_error().
#[derive(Debug)]
pub(crate) struct Fail {
    pub status: lb_status,
    pub message: String,
}

impl Fail {
    pub(crate) fn new(status: lb_status, message: impl Into<String>) -> Fail {
        Fail {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn null(what: &str) -> Fail {
        Fail::new(lb_status::NullArgument, format!("{what} must not be NULL"))
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Fail {
        Fail::new(lb_status::InvalidArgument, message)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::new(lb_status::from_kind(e.kind()), e.message())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

pub(crate) fn set_last_error(message: String) {
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
}

/// Runs `f` inside the panic boundary: a refusal becomes its status (and the
/// thread's last-error message), a panic becomes `LB_STATUS_PANIC`.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), Fail>) -> lb_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => lb_status::Ok,
        Ok(Err(fail)) => {
            let message = format!("{}: {}", fail.status.as_str(), fail.message);
            set_last_error(message);
            fail.status
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic payload".to_owned());
            set_last_error(format!("panic: leasebeat panicked (a bug): {what}"));
            lb_status::Panic
        }
    }
}

/// Runs `f`, which returns a static NUL-terminated string, inside the panic
/// boundary; a panic yields `fallback`.
pub(crate) fn guard_str(
    f: impl FnOnce() -> &'static [u8],
    fallback: &'static [u8],
) -> *const c_char {
    let bytes = catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback);
    debug_assert_eq!(bytes.last(), Some(&0));
    bytes.as_ptr().cast()
}

/// Copies the calling thread's last-error message into `buf` as a
/// NUL-terminated string.
///
/// The message describes the most recent call on this thread that returned a
/// status other than `LB_STATUS_OK` (`"<status>: <what went wrong>"`, e.g.
/// `"null_argument: out must not be NULL"`); it is empty when no call has
/// failed yet. Successful calls do not clear it, and this function never
/// changes it (not even when it fails itself).
///
/// `out_needed` receives the size the message needs, terminating NUL included.
/// A NULL `buf` or a `buf_len` of 0 is a size query: only `*out_needed` is
/// written and `LB_STATUS_OK` returned. A `buf_len` that is too small returns
/// `LB_STATUS_BUFFER_TOO_SMALL` with `*out_needed` written and `buf` untouched.
/// `out_needed` NULL returns `LB_STATUS_NULL_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_last_error(
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    // Not through `guard`: a failure here must not replace the message.
    let result = catch_unwind(AssertUnwindSafe(|| {
        LAST_ERROR.with(|e| {
            let message = e.borrow();
            // SAFETY: the caller promises `buf` is NULL or valid for `buf_len`
            // bytes and `out_needed` is NULL or valid for one write.
            unsafe { copy_text(message.as_bytes(), buf, buf_len, out_needed) }
        })
    }));
    match result {
        Ok(Ok(())) => lb_status::Ok,
        Ok(Err(fail)) => fail.status,
        Err(_) => lb_status::Panic,
    }
}

/// The stable string of a status value, e.g. `"ok"`, `"invalid_config"`,
/// `"null_argument"` (the core's error codes for values 1..=99). Never NULL:
/// an unknown value gives `"unknown"`. The string is static; do not free it.
#[unsafe(no_mangle)]
pub extern "C" fn lb_status_str(status: i32) -> *const c_char {
    guard_str(
        || {
            lb_status::ALL
                .into_iter()
                .find(|s| *s as i32 == status)
                .map_or(&b"unknown\0"[..], lb_status::as_cstr)
        },
        b"unknown\0",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_agree() {
        for s in lb_status::ALL {
            let c = s.as_cstr();
            assert_eq!(&c[..c.len() - 1], s.as_str().as_bytes());
        }
        for k in ErrorKind::ALL {
            assert_eq!(lb_status::from_kind(k).as_str(), k.code());
        }
    }

    #[test]
    fn a_panic_becomes_a_status() {
        let status = guard(|| panic!("boom"));
        assert_eq!(status, lb_status::Panic);
        LAST_ERROR.with(|e| assert!(e.borrow().contains("boom")));
    }
}
