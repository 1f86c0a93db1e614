//! Idempotency keys (HB-34/35, D-12).

use std::fmt;

/// Where new idempotency keys come from. The default is [`UuidV4Keys`]; tests
/// inject a deterministic source such as [`SequentialKeys`].
pub trait KeySource: Send {
    /// A key never returned before. It must be 1..=256 characters, without
    /// a CR, LF or other control character (it is sent as the
    /// `X-Idempotency-Key` header value); a key that breaks this is refused
    /// with `ErrorKind::InvalidKey`.
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
/// formatting per key). With a prefix of at most 18 bytes that text lies
/// inside the value itself (no separate heap block: a heartbeat reaches it
/// in one pointer step from its boxed key source, not two).
#[derive(Clone)]
pub struct SequentialKeys {
    next: u64,
    /// Where the digits start in `text`.
    prefix_len: usize,
    /// `prefix` followed by the decimal digits of `next`.
    text: KeyText,
}

/// Bytes of a [`KeyText`] kept inline: a prefix of up to 18 bytes and the
/// 20 digits of `u64::MAX`.
const INLINE_TEXT: usize = 38;

/// A short text inline, a longer one on the heap. Its bytes are always
/// UTF-8: a prefix (a `str`, ASCII when inline) followed by ASCII digits.
#[derive(Clone)]
enum KeyText {
    Inline { len: u8, bytes: [u8; INLINE_TEXT] },
    Heap(String),
}

impl KeyText {
    /// `text` is a prefix of `prefix_len` bytes and digits.
    fn new(text: String, prefix_len: usize) -> KeyText {
        // (u64::MAX has 20 digits.)
        if prefix_len + 20 <= INLINE_TEXT && text.is_ascii() {
            let mut bytes = [0u8; INLINE_TEXT];
            bytes[..text.len()].copy_from_slice(text.as_bytes());
            KeyText::Inline {
                len: text.len() as u8,
                bytes,
            }
        } else {
            KeyText::Heap(text)
        }
    }

    #[inline]
    fn as_bytes(&self) -> &[u8] {
        match self {
            KeyText::Inline { len, bytes } => &bytes[..usize::from(*len)],
            KeyText::Heap(s) => s.as_bytes(),
        }
    }

    /// Replaces `out`'s contents with this text.
    #[inline]
    fn write_to(&self, out: &mut String) {
        out.clear();
        match self {
            // ASCII: each byte is the char of the same value.
            KeyText::Inline { len, bytes } => {
                let bytes = &bytes[..usize::from(*len)];
                out.reserve(bytes.len());
                out.extend(bytes.iter().map(|&b| char::from(b)));
            }
            KeyText::Heap(s) => out.push_str(s),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            KeyText::Inline { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)])
                .expect("a prefix and ASCII digits are UTF-8"),
            KeyText::Heap(s) => s,
        }
    }

    /// Replaces the last byte, an ASCII digit, by the ASCII digit `d`.
    #[inline]
    fn set_last_digit(&mut self, d: u8) {
        match self {
            KeyText::Inline { len, bytes } => bytes[usize::from(*len) - 1] = d,
            KeyText::Heap(s) => {
                s.pop();
                s.push(char::from(d));
            }
        }
    }

    /// Keeps the first `keep` bytes (a char boundary: the prefix's end or
    /// within the digits), then appends the ASCII digits `digits` (the
    /// inline text has room for 20 digits after the prefix).
    fn replace_tail(&mut self, keep: usize, digits: &[u8]) {
        match self {
            KeyText::Inline { len, bytes } => {
                bytes[keep..keep + digits.len()].copy_from_slice(digits);
                *len = (keep + digits.len()) as u8;
            }
            KeyText::Heap(s) => {
                s.truncate(keep);
                for &d in digits {
                    s.push(char::from(d));
                }
            }
        }
    }
}

impl SequentialKeys {
    /// Keys `"{prefix}1"`, `"{prefix}2"`, ...
    pub fn new(prefix: impl Into<String>) -> SequentialKeys {
        SequentialKeys::starting_at(prefix.into(), 1)
    }

    /// Keys `"{prefix}{next}"`, ... (`next` >= 1).
    fn starting_at(prefix: String, next: u64) -> SequentialKeys {
        let prefix_len = prefix.len();
        let mut text = prefix;
        text.push_str(itoa::Buffer::new().format(next));
        SequentialKeys {
            next,
            prefix_len,
            text: KeyText::new(text, prefix_len),
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
        let text = self.text.as_bytes();
        // Nine times in ten only the last digit changes.
        if let Some(&d) = text.last() {
            if (b'0'..=b'8').contains(&d) && text.len() > self.prefix_len {
                self.text.set_last_digit(d + 1);
                return;
            }
        }
        // A decimal increment of the digits: the last digit that is not a
        // 9 goes up by one, the nines after it become zeros (all nines: a 1
        // and one zero more).
        let digits = &text[self.prefix_len..];
        let (keep, up, zeros) = match digits.iter().rposition(|d| *d != b'9') {
            Some(i) => (self.prefix_len + i, digits[i] + 1, digits.len() - i - 1),
            None => (self.prefix_len, b'1', digits.len()),
        };
        let mut tail = [b'0'; 21];
        tail[0] = up;
        self.text.replace_tail(keep, &tail[..1 + zeros]);
        debug_assert_eq!(
            &self.text.as_str()[self.prefix_len..],
            itoa::Buffer::new().format(self.next)
        );
    }
}

impl fmt::Debug for SequentialKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SequentialKeys({:?}, next {})",
            &self.text.as_str()[..self.prefix_len],
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
        self.text.write_to(out);
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
        let at = |next: u64| SequentialKeys::starting_at("é-".into(), next);
        let mut ascii = SequentialKeys::new("k");
        let mut k = SequentialKeys::new("é-");
        for n in 1..=100_000u64 {
            assert_eq!(k.next_key(), format!("é-{n}"));
            assert_eq!(ascii.next_key(), format!("k{n}"));
        }
        assert!(matches!(ascii.text, KeyText::Inline { .. }));
        // A prefix too long for the inline text (kept on the heap), and the
        // longest one kept inline, around every power of ten.
        for prefix in ["a-prefix-of-nineteen", "prefix-of-eighteen"] {
            for start in [1, 9, 99, 999_999, u64::MAX - 1_000] {
                let mut k = SequentialKeys::starting_at(prefix.into(), start);
                for n in start..start + 1_000 {
                    assert_eq!(k.next_key(), format!("{prefix}{n}"));
                }
            }
        }
        assert!(matches!(
            SequentialKeys::new("prefix-of-eighteen").text,
            KeyText::Inline { .. }
        ));
        assert!(matches!(
            SequentialKeys::new("prefix-of-nineteen!").text,
            KeyText::Heap(_)
        ));
        // Not ASCII: on the heap.
        assert!(matches!(k.text, KeyText::Heap(_)));
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
