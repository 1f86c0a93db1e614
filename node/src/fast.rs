//! The compact crossing of decisions and attempts into JavaScript.
//!
//! Building a `Decision` or an `Attempt` as a JavaScript object from native
//! code costs one `napi_set_named_property` (with a key string internalized
//! anew) per property: about 30 of them per decision plus a Buffer with a
//! finalizer per attempt, which made a decision cost tens of microseconds.
//! Instead, the hidden methods of `Heartbeat` (see `lib.rs`) write the
//! values into a scratch `Uint8Array` owned by `fast.js` (numbers as native
//! `f64`, nanosecond instants as `u64` read back through a `BigUint64Array`,
//! body bytes after the fixed slots) and `fast.js` builds the documented
//! plain objects as object literals. Anything the compact form does not
//! carry (a detail text, a number that is not a safe integer, a body larger
//! than the scratch) sets [`F_SLOW`], and `fast.js` then asks the regular
//! native method for the object. The slot layout below is mirrored in
//! `fast.js`; `__test__/fast.test.mjs` checks both paths agree.

use std::borrow::Cow;

use leasebeat as lb;

use crate::conv::MAX_SAFE;
use crate::{AttemptKind, KeyUse, Mode, Next, OutcomeClass, StopReason, ns_to_ms_f64};

/// Slot indices (in units of 8 bytes) of a decision.
const D_FLAGS: usize = 0;
const D_NEXT: usize = 1;
const D_AT: usize = 2;
const D_AT_NS: usize = 3;
const D_KEY: usize = 4;
const D_KEY_INDEX: usize = 5;
const D_REASON: usize = 6;
const D_MODE: usize = 7;
const D_OUTCOME: usize = 8;
const D_PROVEN: usize = 9;
const D_PROVEN_NS: usize = 10;
const D_EXPIRES: usize = 11;
const D_REMAINING: usize = 12;
const D_WARNINGS: usize = 13;
const D_NUM_MASK: usize = 14;
const D_NUM: usize = 15; // 14 slots, in the order of `lb::Numbers`' fields

/// Slot indices of an action (or attempt).
const A_FLAGS: usize = 32;
const A_TYPE: usize = 33;
const A_REASON: usize = 34;
const A_ID: usize = 35;
const A_KIND: usize = 36;
const A_DUE_MS: usize = 37;
const A_DUE_NS: usize = 38;
const A_KEY_INDEX: usize = 39;
const A_KEY_USE: usize = 40;
const A_KEY_LEN: usize = 41;
const A_BODY_LEN: usize = 42;
const A_SENT_NS: usize = 43;

/// Input slots: `attemptId`, `status`, `now` (milliseconds) and the
/// attempt id whose text `fast.js` holds, written by `fast.js` before a
/// call of `__lbRespondIn`/`__lbRespondInText`.
const IN_FIRST: usize = 56;

/// Where the body bytes start.
const BYTES: usize = 512;

/// Build this one with the regular native method.
pub const F_SLOW: u32 = 1;
const F_RID: u32 = 1 << 1;
const F_AT: u32 = 1 << 2;
const F_AT_NS: u32 = 1 << 3;
const F_KEY: u32 = 1 << 4;
const F_KEY_INDEX: u32 = 1 << 5;
const F_REASON: u32 = 1 << 6;
const F_MODE: u32 = 1 << 7;
const F_PROVEN: u32 = 1 << 8;
const F_PROVEN_NS: u32 = 1 << 9;
const F_EXPIRES: u32 = 1 << 10;
const F_REMAINING: u32 = 1 << 11;

const A_DUE_NS_SET: u32 = 1 << 1;
const A_SENT_NS_SET: u32 = 1 << 2;
const A_ZERO_WINDOW: u32 = 1 << 3;

/// `pollAction`'s type codes (the order of `ActionType`), plus "no attempt".
const T_SEND: u32 = 0;
const T_AWAIT: u32 = 1;
const T_STOP: u32 = 2;
const T_NONE: u32 = 3;

/// The scratch, seen as 8-byte slots.
struct Slots<'a>(&'a mut [u8]);

impl Slots<'_> {
    fn f64(&mut self, slot: usize, v: f64) {
        self.0[slot * 8..slot * 8 + 8].copy_from_slice(&v.to_ne_bytes());
    }

    fn u64(&mut self, slot: usize, v: u64) {
        self.0[slot * 8..slot * 8 + 8].copy_from_slice(&v.to_ne_bytes());
    }

    fn code(&mut self, slot: usize, v: u32) {
        self.f64(slot, f64::from(v));
    }
}

/// The input slots (see [`IN_FIRST`]); NaN when the scratch is too small.
pub fn inputs(scratch: &[u8]) -> [f64; 4] {
    let mut out = [f64::NAN; 4];
    for (i, v) in out.iter_mut().enumerate() {
        let at = (IN_FIRST + i) * 8;
        if let Some(b) = scratch
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
        {
            *v = f64::from_ne_bytes(b);
        }
    }
    out
}

/// A number JavaScript sees as a `number`: a safe integer or an infinity.
fn plain(n: lb::Num) -> Option<f64> {
    match n {
        lb::Num::Inf => Some(f64::INFINITY),
        lb::Num::NegInf => Some(f64::NEG_INFINITY),
        // Through i64: |v| <= 2^53-1 is exact either way, and i128 -> f64 is
        // a slow library call.
        lb::Num::Int(v) if v.unsigned_abs() <= u128::from(MAX_SAFE) => {
            i64::try_from(v).ok().map(|x| x as f64)
        }
        lb::Num::Int(_) => None,
    }
}

fn reason_code(r: lb::StopReason) -> u32 {
    StopReason::from(r) as u32
}

/// Writes `d` into the scratch; false when `fast.js` must take the slow path
/// (the scratch is too small, or `d` carries what the compact form does not).
pub fn write_decision(d: &lb::Decision, scratch: &mut [u8]) -> bool {
    if scratch.len() < BYTES {
        return false;
    }
    let mut s = Slots(scratch);
    let mut flags = 0u32;
    if d.detail.is_some() {
        flags |= F_SLOW;
    }
    if d.reservation_id.is_some() {
        flags |= F_RID;
    }
    let (next, reason) = match d.next {
        lb::Next::Send(lb::AttemptKind::Create) => (Next::Create, None),
        lb::Next::Send(lb::AttemptKind::Extend) => (Next::Extend, None),
        lb::Next::Stop(r) => (Next::Stop, Some(r)),
    };
    s.code(D_NEXT, next as u32);
    if let Some(r) = reason {
        flags |= F_REASON;
        s.code(D_REASON, reason_code(r));
    } else {
        flags |= F_AT;
        s.f64(D_AT, d.at_ns.map_or(f64::INFINITY, ns_to_ms_f64));
        if let Some(at) = d.at_ns {
            flags |= F_AT_NS;
            s.u64(D_AT_NS, at);
        }
    }
    if let Some(k) = d.key {
        flags |= F_KEY;
        s.code(D_KEY, KeyUse::from(k) as u32);
    }
    if let Some(i) = d.key_index {
        flags |= F_KEY_INDEX;
        s.code(D_KEY_INDEX, i);
    }
    if let Some(m) = d.mode {
        flags |= F_MODE;
        s.code(D_MODE, Mode::from(m) as u32);
    }
    s.code(D_OUTCOME, OutcomeClass::from(d.outcome) as u32);
    if let Some(p) = d.proven_until_ns {
        flags |= F_PROVEN | F_PROVEN_NS;
        let ms = if p == u64::MAX {
            f64::INFINITY
        } else {
            ns_to_ms_f64(p)
        };
        s.f64(D_PROVEN, ms);
        s.u64(D_PROVEN_NS, p);
    }
    for (flag, slot, v) in [
        (F_EXPIRES, D_EXPIRES, d.expires_at_ms),
        (F_REMAINING, D_REMAINING, d.remaining_ttl_ms),
    ] {
        if let Some(ms) = v {
            match plain(lb::Num::from_ms(ms)) {
                Some(x) => {
                    flags |= flag;
                    s.f64(slot, x);
                }
                None => flags |= F_SLOW,
            }
        }
    }
    // Only one warning exists: its count says it all.
    let warnings = d
        .warnings
        .iter()
        .filter(|w| matches!(w, lb::Warning::ExtensionBudgetDepleting))
        .count();
    s.f64(D_WARNINGS, warnings as f64);
    let mut mask = 0u32;
    // In `lb::Numbers::NAMES` order.
    for (i, n) in d.numbers.to_array().into_iter().enumerate() {
        if let Some(n) = n {
            match plain(n) {
                Some(x) => {
                    mask |= 1 << i;
                    s.f64(D_NUM + i, x);
                }
                None => flags |= F_SLOW,
            }
        }
    }
    s.code(D_NUM_MASK, mask);
    s.code(D_FLAGS, flags);
    flags & F_SLOW == 0
}

/// What to write for an action: the type code and its attempt or reason.
pub enum Polled<'a> {
    /// Send or await this attempt.
    Attempt(u32, &'a lb::Attempt),
    /// Stopped for this reason.
    Stop(lb::StopReason),
    /// No outstanding attempt (the `attempt` getter when stopped).
    None,
}

impl<'a> Polled<'a> {
    /// The action `pollAction()` returns.
    pub fn action(a: lb::Action<'a>) -> Polled<'a> {
        match a {
            lb::Action::Send(a) => Polled::Attempt(T_SEND, a),
            lb::Action::AwaitOutcome(a) => Polled::Attempt(T_AWAIT, a),
            lb::Action::Stop(r) => Polled::Stop(r),
        }
    }

    /// The outstanding attempt, if any (the type code says nothing more).
    pub fn attempt(a: Option<&'a lb::Attempt>) -> Polled<'a> {
        a.map_or(Polled::None, |a| Polled::Attempt(T_SEND, a))
    }
}

/// Writes an action into the scratch. Returns `Err(())` when `fast.js` must
/// take the slow path, else the text `fast.js` does not have yet: `None`
/// when the attempt's id is `known_id` (its key and body text are those
/// `fast.js` already holds), else the key followed by the body text (the
/// key's length in UTF-16 units is in its slot).
pub fn write_action(p: &Polled<'_>, known_id: f64, scratch: &mut [u8]) -> Result<Option<Text>, ()> {
    if scratch.len() < BYTES {
        return Err(());
    }
    let (type_code, a) = match *p {
        Polled::Attempt(t, a) => (t, a),
        Polled::Stop(r) => {
            let mut s = Slots(scratch);
            s.code(A_TYPE, T_STOP);
            s.code(A_REASON, reason_code(r));
            s.code(A_FLAGS, 0);
            return Ok(None);
        }
        Polled::None => {
            let mut s = Slots(scratch);
            s.code(A_TYPE, T_NONE);
            s.code(A_FLAGS, 0);
            return Ok(None);
        }
    };
    let end = BYTES.checked_add(a.body.len()).ok_or(())?;
    if end > scratch.len() || a.id > MAX_SAFE {
        return Err(());
    }
    scratch[BYTES..end].copy_from_slice(&a.body);
    let mut s = Slots(scratch);
    let mut flags = 0u32;
    s.code(A_TYPE, type_code);
    s.f64(A_ID, a.id as f64);
    s.code(A_KIND, AttemptKind::from(a.kind) as u32);
    s.f64(A_DUE_MS, a.due_ns.map_or(f64::INFINITY, ns_to_ms_f64));
    if let Some(due) = a.due_ns {
        flags |= A_DUE_NS_SET;
        s.u64(A_DUE_NS, due);
    }
    s.code(A_KEY_INDEX, a.key_index);
    s.code(A_KEY_USE, KeyUse::from(a.key_use) as u32);
    s.f64(A_BODY_LEN, a.body.len() as f64);
    if let Some(sent) = a.sent_ns {
        flags |= A_SENT_NS_SET;
        s.u64(A_SENT_NS, sent);
    }
    if a.is_zero_window_retry() {
        flags |= A_ZERO_WINDOW;
    }
    s.code(A_FLAGS, flags);
    if a.id as f64 == known_id {
        return Ok(None);
    }
    let key_ascii = a.key.is_ascii();
    let key_units = if key_ascii {
        a.key.len()
    } else {
        a.key.encode_utf16().count()
    };
    s.f64(A_KEY_LEN, key_units as f64);
    // `from_utf8` checks ASCII a word at a time; the lossy reader, needed
    // only for a body that is not UTF-8, goes byte by byte.
    let text = match std::str::from_utf8(&a.body) {
        Ok(t) => Cow::Borrowed(t),
        Err(_) => String::from_utf8_lossy(&a.body),
    };
    // Usually (a UTF-8 body, room left): the key and the body text after the
    // body in the scratch, from where the caller makes the JavaScript string
    // without an allocation of its own.
    if let Cow::Borrowed(body) = text {
        if let Some(stop) = end
            .checked_add(a.key.len())
            .and_then(|n| n.checked_add(body.len()))
            .filter(|n| *n <= scratch.len())
        {
            let mid = end + a.key.len();
            scratch[end..mid].copy_from_slice(a.key.as_bytes());
            scratch[mid..stop].copy_from_slice(body.as_bytes());
            let ascii = key_ascii && body.is_ascii();
            return Ok(Some(Text::Scratch(end, stop - end, ascii)));
        }
    }
    let mut out = String::with_capacity(a.key.len() + text.len());
    out.push_str(&a.key);
    out.push_str(&text);
    Ok(Some(Text::Owned(out)))
}

/// The key followed by the body text of an attempt new to `fast.js`.
pub enum Text {
    /// In the scratch: `(start, length, all ASCII)`, valid UTF-8.
    Scratch(usize, usize, bool),
    /// Elsewhere.
    Owned(String),
}

/// Marks an action as one `fast.js` must get from the regular method.
pub fn mark_slow(scratch: &mut [u8]) -> Option<Text> {
    if scratch.len() >= BYTES {
        Slots(scratch).code(A_FLAGS, F_SLOW);
    }
    None
}

/// After a decision by `handleResponse`: writes the decision and the action
/// `pollAction()` now returns (the slow flags say when either must be read
/// the regular way) and returns the text as [`write_action`] does. The
/// caller always asks for the next action, so this saves it a call.
pub fn write_decided(
    hb: &lb::Heartbeat,
    d: &lb::Decision,
    known_id: f64,
    scratch: &mut [u8],
) -> Option<Text> {
    if !write_decision(d, scratch) && scratch.len() >= BYTES {
        let mut s = Slots(scratch);
        s.code(D_FLAGS, F_SLOW);
    }
    write_action(&Polled::action(hb.poll_action()), known_id, scratch)
        .unwrap_or_else(|()| mark_slow(scratch))
}
