//! Idempotency keys (HB-34/35, D-12).

use std::fmt;

/// Where new idempotency keys come from. The default is [`UuidV4Keys`]; tests
/// inject a deterministic source such as [`SequentialKeys`].
pub trait KeySource: Send {
    /// A key never returned before. It must be 1..=256 characters.
    fn next_key(&mut self) -> String;

    /// Writes a new key into `out`, replacing its contents (the heartbeat
    /// reuses one buffer instead of allocating a string per key). The
    /// default stores [`KeySource::next_key`]'s string; the crate's sources
    /// write in place. Same contract as `next_key`.
    fn write_key(&mut self, out: &mut String) {
        *out = self.next_key();
    }

    /// Whether every key this source has returned is unique by
    /// construction (no two equal). The heartbeat then does not remember
    /// them, so that the set of used keys
    /// stays bounded over a long lease (it still checks every new key
    /// against the keys it does remember: an adopted create's key, and keys
    /// from sources that do not say this). The default is `false`.
    fn unique_by_construction(&self) -> bool {
        false
    }

    /// Whether every key this source returns is plain JSON string text: no
    /// `"`, `\\` or control character (below U+0020), so that it goes into a
    /// request body as is. A heartbeat asks once, when it is built, and then
    /// writes this source's keys into extend bodies without looking at them
    /// (a source that says `true` and returns such a character would make an
    /// invalid body). The default is `false`: every key is checked and
    /// escaped where needed.
    fn plain_keys(&self) -> bool {
        false
    }
}

/// Random UUIDv4 keys (D-12), e.g. `"3f2b8c1e-..."`.
///
/// The 122 random bits come from `rand`'s `ThreadRng`: a ChaCha12 stream
/// cipher generator per thread, seeded from the operating system and reseeded
/// from it regularly (a cryptographically secure generator, without a system
/// call per key). It is not reseeded by a `fork()` on its own: a process
/// that forks and makes keys in the child should call
/// [`UuidV4Keys::reseed_after_fork`] in the child first.
#[derive(Clone, Copy, Debug, Default)]
pub struct UuidV4Keys;

impl UuidV4Keys {
    /// The length of every key, `8-4-4-4-12` hexadecimal digits.
    pub const LEN: usize = 36;

    /// Reseeds this thread's generator from the operating system: call it in
    /// a child process right after `fork()` (e.g. from Python's
    /// `os.register_at_fork(after_in_child=...)`), so that parent and child
    /// never draw the same keys. Returns `false` if the operating system's
    /// generator failed (the old state is then kept).
    pub fn reseed_after_fork() -> bool {
        rand::rng().reseed().is_ok()
    }
}

impl KeySource for UuidV4Keys {
    fn next_key(&mut self) -> String {
        let mut s = String::with_capacity(UuidV4Keys::LEN);
        self.write_key(&mut s);
        s
    }
    fn write_key(&mut self, out: &mut String) {
        let bits: u128 = rand::random();
        let id = uuid::Builder::from_random_bytes(bits.to_le_bytes()).into_uuid();
        let mut buf = [0u8; UuidV4Keys::LEN];
        out.clear();
        out.push_str(id.hyphenated().encode_lower(&mut buf));
    }
    /// 122 random bits from a cryptographically secure generator: a repeat
    /// within one lease has probability below 2^-60 even after 2^30 keys.
    fn unique_by_construction(&self) -> bool {
        true
    }
    /// Hexadecimal digits and hyphens.
    fn plain_keys(&self) -> bool {
        true
    }
}

/// Deterministic keys `"{prefix}1"`, `"{prefix}2"`, ... for tests and replays.
///
/// The next key is kept as text and counted up in place (no number
/// formatting per key).
#[derive(Clone)]
pub struct SequentialKeys {
    /// `prefix` followed by the decimal digits of `next`.
    text: String,
    /// Where the digits start in `text`.
    prefix_len: usize,
    next: u64,
}

impl SequentialKeys {
    /// Keys `"{prefix}1"`, `"{prefix}2"`, ...
    pub fn new(prefix: impl Into<String>) -> SequentialKeys {
        let mut text = prefix.into();
        let prefix_len = text.len();
        text.push('1');
        SequentialKeys {
            text,
            prefix_len,
            next: 1,
        }
    }

    /// Counts `next` and its digits up by one (saturating at `u64::MAX`,
    /// whose key then repeats).
    #[inline]
    fn advance(&mut self) {
        if self.next == u64::MAX {
            return;
        }
        self.next += 1;
        // Nine times in ten only the last digit changes.
        if let Some(&d) = self.text.as_bytes().last() {
            if (b'0'..=b'8').contains(&d) && self.text.len() > self.prefix_len {
                self.text.pop();
                self.text.push(char::from(d + 1));
                return;
            }
        }
        // A decimal increment of the digits: the last digit that is not a
        // 9 goes up by one, the nines after it become zeros (all nines: a 1
        // and one zero more).
        let digits = &self.text.as_bytes()[self.prefix_len..];
        let (keep, up, zeros) = match digits.iter().rposition(|d| *d != b'9') {
            Some(i) => (self.prefix_len + i, digits[i] + 1, digits.len() - i - 1),
            None => (self.prefix_len, b'1', digits.len()),
        };
        self.text.truncate(keep);
        self.text.push(char::from(up));
        if zeros > 0 {
            const ZEROS: &str = "00000000000000000000";
            self.text.push_str(&ZEROS[..zeros]);
        }
        debug_assert_eq!(
            &self.text[self.prefix_len..],
            itoa::Buffer::new().format(self.next)
        );
    }
}

impl fmt::Debug for SequentialKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SequentialKeys({:?}, next {})",
            &self.text[..self.prefix_len],
            self.next
        )
    }
}

impl KeySource for SequentialKeys {
    fn next_key(&mut self) -> String {
        let mut s = String::new();
        self.write_key(&mut s);
        s
    }
    fn write_key(&mut self, out: &mut String) {
        out.clear();
        out.push_str(&self.text);
        self.advance();
    }
    /// A counter: unique until it nears `u64::MAX` (where the last value
    /// would repeat; from then on keys are remembered and a repeat refused).
    fn unique_by_construction(&self) -> bool {
        self.next < u64::MAX
    }
    /// Digits after a prefix without `"`, `\\` or a control character.
    fn plain_keys(&self) -> bool {
        crate::json::is_plain(&self.text.as_bytes()[..self.prefix_len])
    }
}

impl<F: FnMut() -> String + Send> KeySource for F {
    fn next_key(&mut self) -> String {
        self()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_keys_are_v4_and_distinct() {
        let mut k = UuidV4Keys;
        let a = k.next_key();
        let mut b = String::from("old contents");
        k.write_key(&mut b);
        for key in [&a, &b] {
            let u = uuid::Uuid::parse_str(key).expect("a UUID");
            assert_eq!(u.get_version_num(), 4);
            assert_eq!(u.get_variant(), uuid::Variant::RFC4122);
            assert_eq!(key.len(), UuidV4Keys::LEN);
            assert_eq!(key, &key.to_lowercase());
        }
        assert_ne!(a, b);
        assert!(UuidV4Keys::reseed_after_fork());
        assert_ne!(k.next_key(), a);
    }

    #[test]
    fn sequential_keys_write_in_place() {
        let mut k = SequentialKeys::new("p-");
        let mut s = String::from("xyz");
        k.write_key(&mut s);
        assert_eq!(s, "p-1");
        assert_eq!(k.next_key(), "p-2");
    }

    #[test]
    fn sequential_keys_count_like_the_integers() {
        let at = |next: u64| {
            let mut k = SequentialKeys::new("é-");
            k.next = next;
            k.text = format!("é-{next}");
            k
        };
        let mut k = SequentialKeys::new("é-");
        for n in 1..=100_000u64 {
            assert_eq!(k.next_key(), format!("é-{n}"));
        }
        for start in [9, 99, 999_999, 1 << 40, u64::MAX - 1_000] {
            let mut k = at(start);
            for n in start..start + 1_000 {
                assert_eq!(k.next_key(), format!("é-{n}"));
            }
        }
        let mut k = at(u64::MAX - 2);
        assert_eq!(k.next_key(), format!("é-{}", u64::MAX - 2));
        assert!(k.unique_by_construction());
        assert_eq!(k.next_key(), format!("é-{}", u64::MAX - 1));
        assert!(!k.unique_by_construction());
        assert_eq!(k.next_key(), format!("é-{}", u64::MAX));
        assert_eq!(k.next_key(), format!("é-{}", u64::MAX));
        assert_eq!(
            format!("{k:?}"),
            format!("SequentialKeys(\"é-\", next {})", u64::MAX)
        );
        let mut empty = SequentialKeys::new("");
        assert_eq!(
            (empty.next_key(), empty.next_key()),
            ("1".into(), "2".into())
        );
    }
}
