//! Idempotency keys (HB-34/35, D-12).

use std::fmt;

/// Where new idempotency keys come from. The default is [`UuidV4Keys`]; tests
/// inject a deterministic source such as [`SequentialKeys`].
pub trait KeySource: Send {
    /// A key never returned before. It must be 1..=256 characters.
    fn next_key(&mut self) -> String;

    /// Whether every key this source has returned is unique by
    /// construction (no two equal). The heartbeat then does not remember
    /// them, so that the set of used keys
    /// stays bounded over a long lease (it still checks every new key
    /// against the keys it does remember: an adopted create's key, and keys
    /// from sources that do not say this). The default is `false`.
    fn unique_by_construction(&self) -> bool {
        false
    }
}

/// Random UUIDv4 keys (D-12), e.g. `"3f2b8c1e-..."`.
#[derive(Clone, Copy, Debug, Default)]
pub struct UuidV4Keys;

impl KeySource for UuidV4Keys {
    fn next_key(&mut self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
    /// 122 random bits from the operating system's generator: a repeat
    /// within one lease has probability below 2^-60 even after 2^30 keys.
    fn unique_by_construction(&self) -> bool {
        true
    }
}

/// Deterministic keys `"{prefix}1"`, `"{prefix}2"`, ... for tests and replays.
#[derive(Clone)]
pub struct SequentialKeys {
    prefix: String,
    next: u64,
}

impl SequentialKeys {
    /// Keys `"{prefix}1"`, `"{prefix}2"`, ...
    pub fn new(prefix: impl Into<String>) -> SequentialKeys {
        SequentialKeys {
            prefix: prefix.into(),
            next: 1,
        }
    }
}

impl fmt::Debug for SequentialKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SequentialKeys({:?}, next {})", self.prefix, self.next)
    }
}

impl KeySource for SequentialKeys {
    fn next_key(&mut self) -> String {
        let key = format!("{}{}", self.prefix, self.next);
        self.next = self.next.saturating_add(1);
        key
    }
    /// A counter: unique until it nears `u64::MAX` (where the last value
    /// would repeat; from then on keys are remembered and a repeat refused).
    fn unique_by_construction(&self) -> bool {
        self.next < u64::MAX
    }
}

impl<F: FnMut() -> String + Send> KeySource for F {
    fn next_key(&mut self) -> String {
        self()
    }
}
