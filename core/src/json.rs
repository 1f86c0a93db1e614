//! A strict JSON reader for response bodies (P-1, P-7).
//!
//! Why not `serde_json` here: the protocol needs the literal text of numbers
//! (`-0` is the integer 0, an integer of any size is an integer, `1e400` is a
//! number) and must never let nesting depth change a classification, while
//! `serde_json` keeps numbers as `u64`/`i64`/`f64` (its `arbitrary_precision`
//! feature would change every downstream user's `serde_json` through feature
//! unification) and stops at a recursion limit of 128.
//!
//! The reader is a single pass over the bytes, linear in time; the only
//! recursion is bounded by the caller's `max_depth` (a small constant), and
//! containers nested deeper are validated iteratively with one bit of memory
//! per level and kept as [`J::Deep`], which no schema position accepts.
//!
//! JSON text is RFC 8259: UTF-8, no lone surrogate in a `\u` escape, nothing
//! but whitespace after the value. A duplicated member name in any object the
//! reader builds makes the text invalid (P-1).

use std::borrow::Cow;
use std::collections::HashSet;

/// A JSON value, numbers kept as their literal text.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum J<'a> {
    Null,
    Bool(bool),
    /// The number's literal text, e.g. `-0`, `1e400`, `18446744073709551616`.
    Num(&'a str),
    Str(Cow<'a, str>),
    Arr(Vec<J<'a>>),
    Obj(Vec<(Cow<'a, str>, J<'a>)>),
    /// A container nested deeper than the reader was asked to build: it is
    /// valid JSON text, but no schema position accepts it.
    Deep,
}

impl<'a> J<'a> {
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            J::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Why a text is not JSON (or has a duplicated member).
pub(crate) type ParseError = String;

struct Reader<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Result<Reader<'a>, ParseError> {
        let s = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
        Ok(Reader { s, b: bytes, i: 0 })
    }

    fn err<T>(&self, what: &str) -> Result<T, ParseError> {
        Err(format!("{what} at byte {}", self.i))
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn expect(&mut self, c: u8) -> Result<(), ParseError> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            self.err(&format!("expected {:?}", c as char))
        }
    }

    fn end(&mut self) -> Result<(), ParseError> {
        if self.peek().is_some() {
            return self.err("trailing characters");
        }
        Ok(())
    }

    fn literal(&mut self, word: &str) -> Result<(), ParseError> {
        if self.b[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(())
        } else {
            self.err("invalid literal")
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.b.get(self.i) {
            self.i += 1;
        }
        self.i - start
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Result<&'a str, ParseError> {
        let start = self.i;
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return self.err("invalid number"),
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return self.err("invalid number");
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return self.err("invalid number");
            }
        }
        Ok(&self.s[start..self.i])
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let h = self
            .b
            .get(self.i..self.i + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
            .and_then(|h| u32::from_str_radix(h, 16).ok());
        match h {
            Some(v) => {
                self.i += 4;
                Ok(v)
            }
            None => self.err("invalid \\u escape"),
        }
    }

    /// A string (the opening quote not yet consumed). With `keep`, its
    /// decoded value (borrowed when it has no escape); else `None`, with
    /// the same validation and no allocation.
    fn string(&mut self, keep: bool) -> Result<Option<Cow<'a, str>>, ParseError> {
        self.expect(b'"')?;
        let start = self.i;
        let mut out: Option<String> = None;
        let mut run = start;
        loop {
            let Some(&c) = self.b.get(self.i) else {
                return self.err("unterminated string");
            };
            match c {
                b'"' => {
                    let tail = &self.s[run..self.i];
                    self.i += 1;
                    if !keep {
                        return Ok(None);
                    }
                    return Ok(Some(match out {
                        None => Cow::Borrowed(tail),
                        Some(mut o) => {
                            o.push_str(tail);
                            Cow::Owned(o)
                        }
                    }));
                }
                0..=0x1f => return self.err("control character in string"),
                b'\\' => {
                    let before = &self.s[run..self.i];
                    self.i += 1;
                    let ch = match self.b.get(self.i) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.i += 1;
                            let hi = self.hex4()?;
                            self.i -= 1;
                            let cp = match hi {
                                0xD800..=0xDBFF => {
                                    if self.b.get(self.i + 1..self.i + 3) != Some(b"\\u") {
                                        return self.err("lone surrogate in \\u escape");
                                    }
                                    self.i += 3;
                                    let lo = self.hex4()?;
                                    self.i -= 1;
                                    if !(0xDC00..=0xDFFF).contains(&lo) {
                                        return self.err("lone surrogate in \\u escape");
                                    }
                                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                                }
                                0xDC00..=0xDFFF => {
                                    return self.err("lone surrogate in \\u escape");
                                }
                                v => v,
                            };
                            char::from_u32(cp).expect("a scalar value by construction")
                        }
                        _ => return self.err("invalid escape"),
                    };
                    self.i += 1;
                    if keep {
                        let o = out.get_or_insert_with(String::new);
                        o.push_str(before);
                        o.push(ch);
                    }
                    run = self.i;
                }
                _ => self.i += 1,
            }
        }
    }

    /// Validates one value of any depth without building it: iterative, one
    /// bit per open container (1 = object).
    fn skip(&mut self) -> Result<(), ParseError> {
        let mut stack = BitStack::default();
        loop {
            // A value is expected here.
            match self.peek() {
                Some(b'{') => {
                    self.i += 1;
                    if self.peek() == Some(b'}') {
                        self.i += 1;
                    } else {
                        stack.push(true);
                        self.string(false)?;
                        self.expect(b':')?;
                        continue;
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    if self.peek() == Some(b']') {
                        self.i += 1;
                    } else {
                        stack.push(false);
                        continue;
                    }
                }
                Some(b'"') => {
                    self.string(false)?;
                }
                Some(b't') => self.literal("true")?,
                Some(b'f') => self.literal("false")?,
                Some(b'n') => self.literal("null")?,
                Some(b'-' | b'0'..=b'9') => {
                    self.number()?;
                }
                _ => return self.err("expected a value"),
            }
            // A value ended: close containers or move to the next element.
            loop {
                let Some(is_obj) = stack.top() else {
                    return Ok(());
                };
                match self.peek() {
                    Some(b',') => {
                        self.i += 1;
                        if is_obj {
                            self.string(false)?;
                            self.expect(b':')?;
                        }
                        break;
                    }
                    Some(b'}') if is_obj => {
                        self.i += 1;
                        stack.pop();
                    }
                    Some(b']') if !is_obj => {
                        self.i += 1;
                        stack.pop();
                    }
                    _ => return self.err("expected ',' or the container's end"),
                }
            }
        }
    }

    /// Builds one value, containers down to `depth` levels (0: containers
    /// are [`J::Deep`]). Recursion is bounded by `depth`.
    fn value(&mut self, depth: usize) -> Result<J<'a>, ParseError> {
        match self.peek() {
            Some(b'{' | b'[') if depth == 0 => {
                self.skip()?;
                Ok(J::Deep)
            }
            Some(b'{') => {
                self.i += 1;
                let mut members = Vec::new();
                if self.peek() == Some(b'}') {
                    self.i += 1;
                    return Ok(J::Obj(members));
                }
                loop {
                    let key = self.string(true)?.expect("kept");
                    self.expect(b':')?;
                    let v = self.value(depth - 1)?;
                    members.push((key, v));
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            break;
                        }
                        _ => return self.err("expected ',' or '}'"),
                    }
                }
                if let Some(k) = duplicated(&members) {
                    return Err(format!("duplicated member name {k:?}"));
                }
                Ok(J::Obj(members))
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                if self.peek() == Some(b']') {
                    self.i += 1;
                    return Ok(J::Arr(items));
                }
                loop {
                    items.push(self.value(depth - 1)?);
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            break;
                        }
                        _ => return self.err("expected ',' or ']'"),
                    }
                }
                Ok(J::Arr(items))
            }
            Some(b'"') => Ok(J::Str(self.string(true)?.expect("kept"))),
            Some(b't') => self.literal("true").map(|()| J::Bool(true)),
            Some(b'f') => self.literal("false").map(|()| J::Bool(false)),
            Some(b'n') => self.literal("null").map(|()| J::Null),
            Some(b'-' | b'0'..=b'9') => self.number().map(J::Num),
            _ => self.err("expected a value"),
        }
    }
}

/// A member name that occurs twice, if any. Small objects (every
/// schema-valid one) compare pairwise without allocating; larger ones use a
/// hash set, so the check stays linear.
fn duplicated<'m>(members: &'m [(Cow<'_, str>, J<'_>)]) -> Option<&'m str> {
    if members.len() <= 16 {
        for (i, (k, _)) in members.iter().enumerate() {
            if members[..i].iter().any(|(p, _)| p == k) {
                return Some(k);
            }
        }
        return None;
    }
    let mut seen = HashSet::with_capacity(members.len());
    members
        .iter()
        .map(|(k, _)| k.as_ref())
        .find(|k| !seen.insert(*k))
}

/// Whether `s` goes into a JSON string as is: no `"`, `\\` or control
/// character (below U+0020).
pub(crate) fn is_plain(s: &[u8]) -> bool {
    // (No short circuit: the check vectorizes.)
    !s.iter().fold(false, |bad, &b| {
        bad | (b < 0x20) | (b == b'"') | (b == b'\\')
    })
}

/// The fast path for the common extend success body: an object holding
/// only `"status":"ACTIVE"`, `expires_at_ms` and optionally
/// `remaining_ttl_ms`, each once, integers as plain digit literals of at most
/// 18 digits (no `-`, no leading zero, no fraction or exponent), no escapes,
/// JSON whitespace anywhere it may occur. Returns `(expires_at_ms,
/// remaining_ttl_ms)` exactly when the body is such a text, and `None`
/// otherwise, in which case the caller runs the full strict reader (which
/// then decides valid or invalid and why). Every body this accepts, the
/// strict path accepts with the same numbers: the grammar here is a strict
/// subset (ASCII only, so UTF-8 holds; known names only, so no unknown
/// property; a bit per name, so no duplicate; no null).
pub(crate) fn extend_fast(b: &[u8]) -> Option<(u64, Option<u64>)> {
    fn ws(b: &[u8], mut i: usize) -> usize {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
            i += 1;
        }
        i
    }
    // A plain non-negative integer literal of 1..=18 digits (below 2^63)
    // at `b[i..]`: its value and the index after it. (What follows is the
    // caller's to check: a `.`, `e` or `E` is not one of the bytes it
    // accepts after a number.)
    #[inline(always)]
    fn int(b: &[u8], i: usize) -> Option<(u64, usize)> {
        const POW10: [u64; 9] = [
            1,
            10,
            100,
            1_000,
            10_000,
            100_000,
            1_000_000,
            10_000_000,
            100_000_000,
        ];
        let (mut v, mut n) = (0u64, 0usize);
        // Eight bytes at a time (SWAR): how many leading bytes are digits,
        // then those digits' value in three multiplications.
        loop {
            let x = load8(b, i + n);
            let t = (x & 0xf0f0_f0f0_f0f0_f0f0)
                | ((x.wrapping_add(0x0606_0606_0606_0606) & 0xf0f0_f0f0_f0f0_f0f0) >> 4);
            // Bytes before the first non-digit are exact (a carry only
            // moves up, to later bytes).
            let k = ((t ^ 0x3333_3333_3333_3333).trailing_zeros() / 8) as usize;
            if k == 0 {
                break;
            }
            if n + k > 18 {
                return None;
            }
            // The k digits at the top bytes, zeros (leading digits 0) below.
            let mut d = x.wrapping_sub(0x3030_3030_3030_3030) << (8 * (8 - k));
            d = (d.wrapping_mul(10) + (d >> 8)) & 0x00ff_00ff_00ff_00ff;
            d = (d.wrapping_mul(100) + (d >> 16)) & 0x0000_ffff_0000_ffff;
            d = (d.wrapping_mul(10_000) + (d >> 32)) & 0xffff_ffff;
            v = v * POW10[k] + d;
            n += k;
            if k < 8 {
                break;
            }
        }
        if n == 0 || (n > 1 && b[i] == b'0') {
            return None;
        }
        Some((v, i + n))
    }
    // Eight bytes from `at` (little-endian), zero bytes past the end.
    #[inline]
    fn load8(b: &[u8], at: usize) -> u64 {
        if let Some(chunk) = b.get(at..).and_then(|t| t.first_chunk::<8>()) {
            return u64::from_le_bytes(*chunk);
        }
        let left = b.len().saturating_sub(at);
        if left == 0 {
            return 0;
        }
        // Fewer than eight bytes left: the text's last eight, shifted down.
        if let Some(last) = b.last_chunk::<8>() {
            return u64::from_le_bytes(*last) >> (8 * (8 - left));
        }
        let mut buf = [0u8; 8];
        buf[..left].copy_from_slice(&b[at..]);
        u64::from_le_bytes(buf)
    }
    // The exact text servers write: `{"status":"ACTIVE","expires_at_ms":E}`
    // or `{"status":"ACTIVE","expires_at_ms":E,"remaining_ttl_ms":R}`
    // (compared 16 bytes at a time: no call to memcmp).
    #[inline(always)]
    fn same<const N: usize>(x: Option<&[u8; N]>, y: &[u8; N]) -> bool {
        let Some(x) = x else { return false };
        let word = |s: &[u8; N], at: usize| {
            u128::from_le_bytes(s[at..at + 16].try_into().unwrap_or_default())
        };
        let mut eq = true;
        let mut at = 0;
        while at + 16 < N {
            eq &= word(x, at) == word(y, at);
            at += 16;
        }
        eq & (word(x, N - 16) == word(y, N - 16))
    }
    const HEAD: &[u8; 35] = br#"{"status":"ACTIVE","expires_at_ms":"#;
    const MID: &[u8; 20] = br#","remaining_ttl_ms":"#;
    if same(b.first_chunk::<35>(), HEAD) {
        if let Some((e, j)) = int(b, HEAD.len()) {
            if j + 1 == b.len() && b[j] == b'}' {
                return Some((e, None));
            }
            if same(b.get(j..).and_then(|t| t.first_chunk::<20>()), MID) {
                if let Some((v, k)) = int(b, j + MID.len()) {
                    if k + 1 == b.len() && b[k] == b'}' {
                        return Some((e, Some(v)));
                    }
                }
            }
        }
    }
    let mut i = ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let (mut status, mut expires, mut remaining) = (false, None, None);
    loop {
        i = ws(b, i);
        let rest = b.get(i..)?;
        let (which, len): (u8, usize) = match rest.get(1) {
            Some(b's') if rest.starts_with(b"\"status\"") => (0, 8),
            Some(b'e') if rest.starts_with(b"\"expires_at_ms\"") => (1, 15),
            Some(b'r') if rest.starts_with(b"\"remaining_ttl_ms\"") => (2, 18),
            _ => return None,
        };
        i = ws(b, i + len);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = ws(b, i + 1);
        match which {
            0 if !status && b.get(i..)?.starts_with(b"\"ACTIVE\"") => {
                status = true;
                i += 8;
            }
            1 if expires.is_none() => {
                let (v, j) = int(b, i)?;
                expires = Some(v);
                i = j;
            }
            2 if remaining.is_none() => {
                let (v, j) = int(b, i)?;
                remaining = Some(v);
                i = j;
            }
            _ => return None,
        }
        i = ws(b, i);
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => {
                i += 1;
                break;
            }
            _ => return None,
        }
    }
    if ws(b, i) != b.len() || !status {
        return None;
    }
    Some((expires?, remaining))
}

#[derive(Default)]
struct BitStack {
    words: Vec<u64>,
    len: usize,
}

impl BitStack {
    fn push(&mut self, bit: bool) {
        let (w, b) = (self.len / 64, self.len % 64);
        if w == self.words.len() {
            self.words.push(0);
        }
        if bit {
            self.words[w] |= 1 << b;
        } else {
            self.words[w] &= !(1 << b);
        }
        self.len += 1;
    }
    fn top(&self) -> Option<bool> {
        let n = self.len.checked_sub(1)?;
        Some(self.words[n / 64] >> (n % 64) & 1 == 1)
    }
    fn pop(&mut self) {
        self.len = self.len.saturating_sub(1);
    }
}

/// Parses a whole JSON text, building containers down to `max_depth` levels
/// (deeper ones are validated and kept as [`J::Deep`]).
pub(crate) fn parse(bytes: &[u8], max_depth: usize) -> Result<J<'_>, ParseError> {
    let mut r = Reader::new(bytes)?;
    let v = r.value(max_depth)?;
    r.end()?;
    Ok(v)
}

/// The longest `error` text kept from an error body (in bytes, cut at a
/// character boundary); longer codes are never one of the permanent ones.
pub(crate) const MAX_ERROR_CODE_BYTES: usize = 256;

/// The top-level string `error` member of an error body (P-3, P-7), reading
/// nothing else into memory: the text must be JSON, its value an object, and
/// `error` a string present once. Everything else in the body (deep
/// `details`, huge numbers, duplicated names elsewhere) is validated as JSON
/// text and skipped. The string is cut to [`MAX_ERROR_CODE_BYTES`] (the
/// flag says it was cut).
pub(crate) fn top_level_error(bytes: &[u8]) -> Option<(String, bool)> {
    top_level_string(bytes, "error", MAX_ERROR_CODE_BYTES)
}

/// The top-level string member `name` of an object body, read as
/// [`top_level_error`] reads `error` (present once, a string, the rest
/// validated and skipped), cut to `max` bytes.
pub(crate) fn top_level_string(bytes: &[u8], name: &str, max: usize) -> Option<(String, bool)> {
    let mut r = Reader::new(bytes).ok()?;
    if r.peek() != Some(b'{') {
        r.skip().ok()?;
        r.end().ok()?;
        return None;
    }
    r.i += 1;
    let mut found: Option<(String, bool)> = None;
    let mut seen = false;
    if r.peek() == Some(b'}') {
        r.i += 1;
    } else {
        loop {
            let key = r.string(true).ok()?.expect("kept");
            r.expect(b':').ok()?;
            if key == name {
                if seen {
                    // Two such members: which one the server meant is unknown.
                    return None;
                }
                seen = true;
                if r.peek() == Some(b'"') {
                    let s = r.string(true).ok()?.expect("kept");
                    found = Some(cut(&s, max));
                } else {
                    r.skip().ok()?;
                }
            } else {
                r.skip().ok()?;
            }
            match r.peek() {
                Some(b',') => r.i += 1,
                Some(b'}') => {
                    r.i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    r.end().ok()?;
    found
}

/// `s` cut to at most `max` bytes at a character boundary, and whether it was cut.
pub(crate) fn cut(s: &str, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s.to_owned(), false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (s[..end].to_owned(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_their_text() {
        assert_eq!(parse(b"-0", 4), Ok(J::Num("-0")));
        assert_eq!(parse(b" 1e400 ", 4), Ok(J::Num("1e400")));
        for bad in ["01", "-", "1.", ".5", "1e", "+1", "0x1", "NaN", "Infinity"] {
            assert!(parse(bad.as_bytes(), 4).is_err(), "{bad}");
        }
    }

    #[test]
    fn strings() {
        assert_eq!(
            parse(br#""a\u00e9\ud83d\ude00\n""#, 1).unwrap().as_str(),
            Some("a\u{e9}\u{1f600}\n")
        );
        for bad in [
            &br#""\ud800""#[..],
            br#""\udc00""#,
            br#""\ud800\u0041""#,
            br#""\ud800x""#,
            b"\"\x01\"",
            b"\"\xff\"",
            br#""\x""#,
            br#""abc"#,
        ] {
            assert!(parse(bad, 1).is_err(), "{}", String::from_utf8_lossy(bad));
            assert!(top_level_error(bad).is_none());
        }
    }

    #[test]
    fn depth_never_invalidates() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            parse(deep.as_bytes(), 3),
            Ok(J::Arr(vec![J::Arr(vec![J::Arr(vec![J::Deep])])]))
        );
        let body = format!(
            r#"{{"details":{}1{},"error":"NOT_FOUND"}}"#,
            r#"{"a":["#.repeat(50_000),
            "]}".repeat(50_000)
        );
        assert_eq!(
            top_level_error(body.as_bytes()),
            Some(("NOT_FOUND".into(), false))
        );
        let unbalanced = format!("{}{}", "[".repeat(1000), "]".repeat(999));
        assert!(parse(unbalanced.as_bytes(), 3).is_err());
    }

    #[test]
    fn duplicates() {
        assert!(parse(br#"{"a":{"b":1,"b":2}}"#, 4).is_err());
        assert!(parse(br#"{"a":1,"\u0061":2}"#, 4).is_err());
        assert!(parse(br#"[{"b":1},{"b":2}]"#, 4).is_ok());
        assert_eq!(top_level_error(br#"{"error":"A","error":"A"}"#), None);
        assert_eq!(
            top_level_error(br#"{"error":"A","d":{"x":1,"x":2}}"#),
            Some(("A".into(), false))
        );
    }

    #[test]
    fn error_member() {
        assert_eq!(top_level_error(br#"{"error":7}"#), None);
        assert_eq!(top_level_error(br#"{"error":"X"} x"#), None);
        assert_eq!(top_level_error(br#"["error"]"#), None);
        assert_eq!(
            top_level_error(br#"{"n":1e400,"m":-0,"error":"TENANT_CLOSED"}"#),
            Some(("TENANT_CLOSED".into(), false))
        );
        let long = format!(r#"{{"error":"{}"}}"#, "é".repeat(1000));
        let (s, was_cut) = top_level_error(long.as_bytes()).unwrap();
        assert!(was_cut && s.len() <= MAX_ERROR_CODE_BYTES && s.len() >= MAX_ERROR_CODE_BYTES - 1);
    }
}
