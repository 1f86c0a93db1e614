//! The one error type of the core.

use std::fmt;

/// Every way a call into the core can be refused. Adding a kind is meant to be
/// a compile error in every binding until it is mapped: the enum is exhaustive
/// on purpose (no `#[non_exhaustive]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The configuration is out of range (e.g. `ttl_ms` outside 1000..=86400000).
    InvalidConfig,
    /// An argument is out of range (e.g. an HTTP status outside 100..=999).
    InvalidArgument,
    /// An event's time is earlier than the previous event's time.
    TimeWentBackwards,
    /// The attempt named is not the outstanding one (late, duplicate or
    /// unknown, D-14).
    NotOutstanding,
    /// An outcome was reported for an attempt that was never marked sent.
    NotSent,
    /// The attempt was already marked sent.
    AlreadySent,
    /// The heartbeat has stopped; a stop is final.
    Stopped,
    /// The key source produced an unusable key, or an adopted create's key
    /// is unusable: empty, longer than 256 characters, with a CR, LF or
    /// other control character (not a header value), or already used on
    /// this lease.
    InvalidKey,
}

impl ErrorKind {
    /// Every kind, in a fixed order.
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::InvalidConfig,
        ErrorKind::InvalidArgument,
        ErrorKind::TimeWentBackwards,
        ErrorKind::NotOutstanding,
        ErrorKind::NotSent,
        ErrorKind::AlreadySent,
        ErrorKind::Stopped,
        ErrorKind::InvalidKey,
    ];

    /// The stable code string, the same in every language.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::InvalidConfig => "invalid_config",
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::TimeWentBackwards => "time_went_backwards",
            ErrorKind::NotOutstanding => "not_outstanding",
            ErrorKind::NotSent => "not_sent",
            ErrorKind::AlreadySent => "already_sent",
            ErrorKind::Stopped => "stopped",
            ErrorKind::InvalidKey => "invalid_key",
        }
    }
}

/// An error: a kind and a message. Returning one changes nothing in the
/// heartbeat that returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the code.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.code(), self.message)
    }
}

impl std::error::Error for Error {}
