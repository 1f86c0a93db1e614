//! JNI library of leasebeat: the native half of the Java binding
//! (`io.leasebeat.NativeBridge`).
//!
//! Two calling conventions:
//!
//! * Hot calls (events, polls; the adoption and the state through `long[]`
//!   and `byte[]` arrays instead): the Java side passes the address of the
//!   call's direct buffer ([`Buf`]: the response body comes in it, the
//!   result is written in it in place) and an `Object[]`; the call
//!   fills the *slots* with primitives (indices of enum constants, u64 bit
//!   patterns, the numbers' packed tags and magnitudes, text lengths) and
//!   the *text* area with the bytes of what really is text or bytes (the
//!   reservation id, a detail, the attempt's key and body; one that does
//!   not fit comes as an object instead), so the hot path creates no Java
//!   object in Rust. A decision
//!   also brings back the action it leaves ([`DECIDED_LEN`]), so that the
//!   `pollAction()` after it needs no second crossing. Returns a status: `0` OK,
//!   `1` core ERROR (objects 0 and 1: the Java `Code` constant name and the
//!   message), `2` PANIC (object 1: the message). The layout is below
//!   ([`dec`], [`act`], [`state`]) and mirrored in `Slots.java`. Nothing is
//!   serialized: the decision's JSON is written by the core only when Java
//!   asks for it (`Decision.toJson()` → [`nativeDecisionJson`]).
//! * Cold calls (construction, catalog, arithmetic, Retry-After) return one
//!   `byte[]` *envelope* decoded by `Wire.java` (big-endian): a status byte
//!   (`0` OK + payload, `1` ERROR: Java constant, stable code, message, `2`
//!   PANIC: message). Payload encodings: `str` = u32 length + UTF-8; `num` =
//!   u8 tag (0 = -inf, 1 = finite, 2 = +inf) then, if finite, the i128 as 16
//!   bytes; `u64` = 8 bytes.
//!
//! Every entry point runs its body inside `catch_unwind` (and
//! `EnvUnowned::with_env` adds a second one), so a panic becomes a Java
//! `LeaseException` with `Code.PANIC`, never an abort. A JNI failure becomes a
//! pending `RuntimeException` (jni's `ThrowRuntimeExAndDefault`).
//!
//! Enum constants cross as indices into tables that [`nativeCatalog`] sends
//! once (Java maps each stable string to its constant), so no Java ordinal is
//! assumed.
//!
//! The handle is the address of a [`Handle`] in [`HANDLES`] (the heartbeats
//! lie side by side there, see [`pool`]) turned into a `jlong`. The Java side
//! guarantees it is freed once, never while another call is inside, and
//! never used after it was freed (its monitor plus a `Cleaner`).

mod journal;
mod pool;
mod settlement;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use jni::errors::ThrowRuntimeExAndDefault;
use jni::objects::{JByteArray, JClass, JLongArray, JObjectArray, JString};
use jni::refs::Reference;
use jni::sys::{jboolean, jint, jlong};
use jni::{Env, EnvUnowned};
use leasebeat::arith;
use leasebeat::{
    Action, AdoptedCreate, Attempt, AttemptKind, Config, CreateOutcome, Decision, ErrorKind,
    Heartbeat, KeyUse, Mode, Next, Num, Numbers, OutcomeClass, Response, ResponseRef,
    SequentialKeys, StopReason, TransportFailure, Warning, Warnings,
};
use serde_json::Value;

const OK: u8 = 0;
const ERROR: u8 = 1;
const PANIC: u8 = 2;
/// A journal error envelope: `str kind`, `opt str path`, `str message`, `opt str
/// quarantined_to` (see `journal.rs`).
const JOURNAL_ERROR: u8 = 3;

/// One heartbeat behind a lock: Java may call from many threads at once.
/// Starts on a cache line (its size is a multiple of 64: 576 bytes today), so
/// a decision touches no line it does not need.
#[repr(align(64))]
struct Handle {
    hb: Mutex<Heartbeat>,
}

/// Every live handle ([`into_handle`] to `nativeFree`).
static HANDLES: pool::Pool<Handle> = pool::Pool::new();

// ----- enum tables -----

/// A table of enum constants: `$all` lists them in the index order Java
/// learns from the catalog; `$index` maps a constant to its index. The match
/// is exhaustive, so a new constant in the core is a compile error here.
macro_rules! table {
    ($index:ident, $all:ident, $t:ident, [$($v:ident),* $(,)?]) => {
        const $all: &[$t] = &[$($t::$v),*];
        fn $index(v: $t) -> i64 {
            match v {
                $($t::$v)|* => {}
            }
            index_in($all, v)
        }
    };
}

fn index_in<T: PartialEq>(all: &[T], v: T) -> i64 {
    all.iter().position(|x| *x == v).map_or(-1, |i| i as i64)
}

table!(kind_index, KINDS, AttemptKind, [Create, Extend]);
table!(key_use_index, KEY_USES, KeyUse, [New, Same]);
table!(mode_index, MODES, Mode, [Primary, Fallback]);
table!(warning_index, WARNINGS, Warning, [ExtensionBudgetDepleting]);
table!(
    outcome_index,
    OUTCOMES,
    OutcomeClass,
    [
        Success,
        Ambiguous,
        TransportFailure,
        ServerError,
        Throttled,
        Permanent,
        Rejected,
        Unexpected,
        Cancelled,
    ]
);

fn reason_index(r: StopReason) -> i64 {
    index_in(&StopReason::ALL, r)
}

/// The Java `Code` constant for a core error kind. Exhaustive on purpose: a
/// new kind is a compile error here until the Java enum has it too.
fn java_code(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidConfig => "INVALID_CONFIG",
        ErrorKind::InvalidArgument => "INVALID_ARGUMENT",
        ErrorKind::TimeWentBackwards => "TIME_WENT_BACKWARDS",
        ErrorKind::NotOutstanding => "NOT_OUTSTANDING",
        ErrorKind::NotSent => "NOT_SENT",
        ErrorKind::AlreadySent => "ALREADY_SENT",
        ErrorKind::Stopped => "STOPPED",
        ErrorKind::InvalidKey => "INVALID_KEY",
    }
}

/// The Java `StopReason` constant for a core stop reason. Exhaustive on
/// purpose, like [`java_code`].
fn java_reason(reason: StopReason) -> &'static str {
    match reason {
        StopReason::LeaseTooShort => "LEASE_TOO_SHORT",
        StopReason::RetryWindowExhausted => "RETRY_WINDOW_EXHAUSTED",
        StopReason::NoProgress => "NO_PROGRESS",
        StopReason::Throttled => "THROTTLED",
        StopReason::Expired => "EXPIRED",
        StopReason::Finalized => "FINALIZED",
        StopReason::MaxExtensions => "MAX_EXTENSIONS",
        StopReason::TenantClosed => "TENANT_CLOSED",
        StopReason::NotFound => "NOT_FOUND",
        StopReason::Rejected => "REJECTED",
        StopReason::UnexpectedStatus => "UNEXPECTED_STATUS",
        StopReason::CreateFailed => "CREATE_FAILED",
        StopReason::CreateRejected => "CREATE_REJECTED",
        StopReason::NoReservation => "NO_RESERVATION",
        StopReason::Cancelled => "CANCELLED",
    }
}

/// Whether `Numbers::to_array` follows `Numbers::NAMES` (the order Java
/// uses).
fn numbers_order_ok() -> bool {
    let mut a = [None; 14];
    for (i, v) in a.iter_mut().enumerate() {
        *v = Some(Num::Int(i as i128));
    }
    let n = Numbers::from_array(a);
    Numbers::NAMES.len() == 14
        && Numbers::NAMES
            .iter()
            .enumerate()
            .all(|(i, name)| n.get(name) == Some(Num::Int(i as i128)) && n.to_array()[i] == a[i])
}

// ----- slot layouts (mirrored in Slots.java) -----

/// A decision: `dec::LEN` slots from an offset, objects (reservation id,
/// detail) from an offset.
mod dec {
    /// 0 send, 1 stop.
    pub const NEXT: usize = 0;
    /// Attempt kind index (send) or stop reason index (stop).
    pub const WHAT: usize = 1;
    /// Presence bits, `F_*`.
    pub const FLAGS: usize = 2;
    pub const AT: usize = 3;
    pub const KEY: usize = 4;
    pub const KEY_INDEX: usize = 5;
    pub const MODE: usize = 6;
    pub const OUTCOME: usize = 7;
    pub const PROVEN: usize = 8;
    pub const EXPIRES: usize = 9;
    pub const REMAINING: usize = 10;
    /// The numbers' tags, `Numbers::packed`: three bits per number in
    /// `Numbers::NAMES` order: 0 absent, 1 finite `NUMS[i]` (unsigned), 2
    /// finite `-NUMS[i]`, 3 +inf, 4 -inf.
    pub const NUM_TAGS: usize = 11;
    pub const WARN_COUNT: usize = 12;
    /// Warning indices, at most `MAX_WARN` (the rest 0).
    pub const WARN: usize = 13;
    pub const MAX_WARN: usize = 7;
    /// Per number: its magnitude's u64 bit pattern (0 when not finite).
    pub const NUMS: usize = 20;
    /// The byte lengths of the reservation id and the detail in the text
    /// buffer (-1 absent, -2 too long for it: the object instead).
    pub const RID_LEN: usize = 34;
    pub const DETAIL_LEN: usize = 35;
    pub const LEN: usize = 36;

    pub const F_AT: i64 = 1;
    pub const F_KEY: i64 = 2;
    pub const F_KEY_INDEX: i64 = 4;
    pub const F_MODE: i64 = 8;
    pub const F_PROVEN: i64 = 16;
    pub const F_EXPIRES: i64 = 32;
    pub const F_REMAINING: i64 = 64;

    /// Objects: the reservation id, the detail.
    pub const O_RID: usize = 0;
    pub const O_DETAIL: usize = 1;
}

/// An action (`poll_action`): `act::LEN` slots from an offset (0 for a poll,
/// [`dec::LEN`] after a decision, [`DECIDED_LEN`]); objects from an offset
/// (0 for a poll, 2 after a decision): the key (`String`) and the body
/// (`byte[]`), set only when the attempt's id is not the one the caller
/// already holds.
mod act {
    /// 0 send, 1 await outcome, 2 stop.
    pub const TAG: usize = 0;
    pub const REASON: usize = 1;
    pub const ID: usize = 2;
    pub const KIND: usize = 3;
    /// 1 when `DUE` holds the due time (else +infinity).
    pub const DUE_SET: usize = 4;
    pub const DUE: usize = 5;
    pub const KEY_INDEX: usize = 6;
    pub const KEY_USE: usize = 7;
    pub const SENT_SET: usize = 8;
    pub const SENT: usize = 9;
    pub const ZERO_WINDOW: usize = 10;
    /// Text lengths of the key and the body, as [`dec::RID_LEN`] (-1 also
    /// when the caller holds the attempt already).
    pub const KEY_LEN: usize = 11;
    pub const BODY_LEN: usize = 12;
    pub const LEN: usize = 13;

    pub const O_KEY: usize = 0;
    pub const O_BODY: usize = 1;
}

/// The state (`nativeState`): the action, then these slots; objects: key,
/// body, reservation id, then the last decision's two.
mod state {
    /// -1 none, else the mode index.
    pub const MODE: usize = super::act::LEN;
    pub const MAX_RTT: usize = MODE + 1;
    pub const LAST_EVENT: usize = MODE + 2;
    /// 1 when a last decision follows at `DECISION`.
    pub const HAS_LAST: usize = MODE + 3;
    pub const DECISION: usize = 18;
    pub const LEN: usize = DECISION + super::dec::LEN;

    pub const O_RID: usize = 2;
    pub const O_DECISION: usize = 3;
}

/// A decision-returning call writes the decision, then the action it leaves
/// (so that the `pollAction()` that follows needs no second crossing): this
/// many slots; objects: the decision's two, then the action's two.
const DECIDED_LEN: usize = dec::LEN + act::LEN;
const DECIDED_O_ACTION: usize = 2;

/// The adoption: a decided result, then the handle.
const ADOPT_HANDLE: usize = DECIDED_LEN;

// ----- the hot calling convention -----

/// The most text bytes a hot call hands back in the Java buffer (the size
/// Java allocates, `Slots.TEXT_LEN`); more goes as objects.
const TEXT_CAP: usize = 512;

/// The native buffer of a raw hot call (`Slots.Scratch.buf`, a
/// direct `ByteBuffer` of [`BUF_LEN`] bytes whose address Java passes as a
/// `long`): the result slots (native-endian `i64`s) from byte 0, the text
/// from [`BUF_TEXT`], the input body from [`BUF_IN`] (at most [`BUF_IN_CAP`]
/// bytes; a longer body comes as a `byte[]`). Reading and writing it takes
/// no JNI call. Mirrored in `Slots.java`.
const BUF_TEXT: usize = 512;
const BUF_IN: usize = BUF_TEXT + TEXT_CAP;
const BUF_IN_CAP: usize = 3072;
const BUF_LEN: usize = BUF_IN + BUF_IN_CAP;
const _: () = assert!(DECIDED_LEN * 8 <= BUF_TEXT);

/// Why a call produced no result.
enum Fail {
    Core(leasebeat::Error),
    Jni(jni::errors::Error),
    /// A Java exception is pending (thrown when the native method returns).
    Pending,
    /// A journal failure (cold calls only: `io.leasebeat.JournalException`).
    Journal(leasebeat::journal::JournalError),
}

impl From<jni::errors::Error> for Fail {
    fn from(e: jni::errors::Error) -> Fail {
        Fail::Jni(e)
    }
}

impl From<leasebeat::Error> for Fail {
    fn from(e: leasebeat::Error) -> Fail {
        Fail::Core(e)
    }
}

fn arg_fail(message: &str) -> Fail {
    Fail::Core(leasebeat::Error::new(ErrorKind::InvalidArgument, message))
}

/// Objects that did not fit in the text buffer: (object index, bytes,
/// whether a `String`), created as Java objects after the core call (rare).
type Objects = Vec<(usize, Vec<u8>, bool)>;

/// Where a hot call writes its result: zeroed slots and a text area, either
/// the call's native buffer itself ([`Buf::output`], the hot path: no
/// staging copy) or arrays on the stack copied to Java arrays after the call
/// ([`hot`]).
struct Out<'a> {
    slots: &'a mut [i64],
    /// Bytes for Java's text buffer (strings and bodies one after the other,
    /// in the order they are put): the first `text_len`; its length is the
    /// Java buffer's size (at most [`TEXT_CAP`]).
    text: &'a mut [u8],
    text_len: usize,
    objects: Objects,
}

impl<'a> Out<'a> {
    fn new(slots: &'a mut [i64], text: &'a mut [u8]) -> Out<'a> {
        Out {
            slots,
            text,
            text_len: 0,
            objects: Vec::new(),
        }
    }

    fn text(&self) -> &[u8] {
        &self.text[..self.text_len]
    }

    /// Hands bytes to Java: appended to the text buffer when they fit (slot =
    /// their length), else later as a `String` (`string`) or `byte[]` at
    /// object `obj` (slot = -2). Creating no Java object in Rust is the fast
    /// path.
    fn put_text(&mut self, slot: usize, obj: usize, b: &str, string: bool) {
        self.put_bytes(slot, obj, b.as_bytes(), string)
    }

    fn put_bytes(&mut self, slot: usize, obj: usize, b: &[u8], string: bool) {
        let end = self.text_len + b.len();
        if end <= self.text.len() {
            self.text[self.text_len..end].copy_from_slice(b);
            self.text_len = end;
            self.slots[slot] = b.len() as i64;
        } else {
            self.objects.push((obj, b.to_vec(), string));
            self.slots[slot] = -2;
        }
    }

    /// Creates the objects that did not fit in the text buffer.
    fn set_objects(&self, env: &mut Env<'_>, objs: &JObjectArray<'_>) -> Result<(), Fail> {
        set_objects(&self.objects, env, objs)
    }
}

/// Creates the objects that did not fit in the text buffer ([`Objects`]).
fn set_objects(objects: &Objects, env: &mut Env<'_>, objs: &JObjectArray<'_>) -> Result<(), Fail> {
    for (obj, b, string) in objects {
        if *string {
            let text = std::str::from_utf8(b).map_err(|_| arg_fail("text is not UTF-8"))?;
            let local = env.new_string(text)?;
            objs.set_element(env, *obj, &local)?;
        } else {
            let local = env.byte_array_from_slice(b)?;
            objs.set_element(env, *obj, &local)?;
        }
    }
    Ok(())
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    let message = if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    };
    // Dropping a payload may itself panic; leak it instead.
    std::mem::forget(payload);
    format!("Rust panic: {message}")
}

/// Runs one hot entry point through the jni crate (the adoption and the
/// state, whose inputs are objects): `f` fills `out.slots` (of which the
/// first `used` go to Java). Returns the status (see the module
/// documentation).
fn hot<'c, F>(
    mut unowned: EnvUnowned<'c>,
    slots: JLongArray<'c>,
    objs: JObjectArray<'c>,
    text: JByteArray<'c>,
    f: F,
) -> jint
where
    F: FnOnce(&mut Env<'c>, &mut Out) -> Result<usize, Fail>,
{
    unowned
        .with_env(|env| -> jni::errors::Result<jint> {
            let text_cap = if text.is_null() { 0 } else { text.len(env)? };
            let mut slot_area = [0; state::LEN + 1];
            let mut text_area = [0; TEXT_CAP];
            let mut out = Out::new(&mut slot_area, &mut text_area[..text_cap.min(TEXT_CAP)]);
            let r = catch_unwind(AssertUnwindSafe(|| f(env, &mut out)));
            let r = match r {
                Ok(Ok(used)) => Ok((used, out)),
                Ok(Err(e)) => Err(Some(e)),
                Err(payload) => {
                    return finish_error(env, &objs, PANIC, None, panic_message(payload));
                }
            };
            finish(env, r, &slots, &objs, &text)
        })
        .resolve::<ThrowRuntimeExAndDefault>()
}

/// The end of a hot call on the slow path (through the jni crate): writes a
/// result (`Ok`), or the error's status and strings. `Err(None)` = a Java
/// exception is already pending.
fn finish(
    env: &mut Env<'_>,
    r: Result<(usize, Out<'_>), Option<Fail>>,
    slots: &JLongArray<'_>,
    objs: &JObjectArray<'_>,
    text: &JByteArray<'_>,
) -> jni::errors::Result<jint> {
    match r {
        Ok((used, out)) => {
            if let Err(e) = out.set_objects(env, objs) {
                return finish_fail(env, objs, e);
            }
            if used > 0 {
                slots.set_region(env, 0, &out.slots[..used])?;
            }
            if out.text_len > 0 {
                // jbyte is i8 (the slow path: a copy is fine).
                let t: Vec<i8> = out.text().iter().map(|&b| b as i8).collect();
                text.set_region(env, 0, &t)?;
            }
            Ok(0)
        }
        Err(None) => Err(jni::errors::Error::JavaException),
        Err(Some(e)) => finish_fail(env, objs, e),
    }
}

/// A failure's status: a core error's code and message, or a Java exception
/// (pending, or raised for a JNI failure).
fn finish_fail(env: &mut Env<'_>, objs: &JObjectArray<'_>, e: Fail) -> jni::errors::Result<jint> {
    match e {
        Fail::Pending => Err(jni::errors::Error::JavaException),
        Fail::Jni(e) => Err(e),
        // Hot calls never touch the journal; reported as an argument error if one did.
        Fail::Journal(e) => finish_error(env, objs, ERROR, Some("INVALID_ARGUMENT"), e.to_string()),
        Fail::Core(e) => finish_error(
            env,
            objs,
            ERROR,
            Some(java_code(e.kind())),
            e.message().to_owned(),
        ),
    }
}

/// A core error (objects 0 and 1: the Java `Code` constant and the message)
/// or a panic (object 1: the message).
fn finish_error(
    env: &mut Env<'_>,
    objs: &JObjectArray<'_>,
    status: u8,
    code: Option<&str>,
    message: String,
) -> jni::errors::Result<jint> {
    if let Some(code) = code {
        let code = env.new_string(code)?;
        objs.set_element(env, 0, &code)?;
    }
    let message = env.new_string(message)?;
    objs.set_element(env, 1, &message)?;
    Ok(jint::from(status))
}

/// The raw JNI environment of a native call, for the hot calls that take
/// only primitives and primitive arrays: each JNI function is called once,
/// directly, instead of through `EnvUnowned::with_env` (which costs about
/// 50 ns per call) and the jni crate's exception checks before and after each
/// function (three JNI transitions instead of one). Anything unusual (an
/// error, a panic, text that does not fit) goes to the jni crate's path.
#[derive(Clone, Copy)]
struct Raw(*mut jni::sys::JNIEnv);

impl Raw {
    fn iface(&self) -> &jni::sys::JNINativeInterface_ {
        // SAFETY: the JVM passes a valid, non-null JNIEnv pointer to a native
        // method, valid for the duration of the call on this thread.
        unsafe { &**self.0 }
    }

    fn pending(self) -> bool {
        // SAFETY: as `iface`; ExceptionCheck (JNI 1.2) may be called with an
        // exception pending.
        unsafe { (self.iface().v1_2.ExceptionCheck)(self.0) }
    }

    /// The length of a non-null array.
    fn len(self, a: jni::sys::jarray) -> Result<usize, Fail> {
        if a.is_null() {
            return Err(arg_fail("null array"));
        }
        // SAFETY: `a` is a live non-null local reference to an array (the
        // Java signature of every caller declares it so).
        let n = unsafe { (self.iface().v1_1.GetArrayLength)(self.0, a) };
        usize::try_from(n).map_err(|_| Fail::Pending)
    }

    /// A non-null `int[]`, copied (benchmark hooks only).
    fn ints(self, a: jni::sys::jintArray) -> Result<Vec<i32>, Fail> {
        let n = self.len(a)?;
        let mut v = vec![0i32; n];
        // SAFETY: `v` holds `n` ints, the array's length.
        unsafe { (self.iface().v1_1.GetIntArrayRegion)(self.0, a, 0, n as i32, v.as_mut_ptr()) };
        if self.pending() {
            return Err(Fail::Pending);
        }
        Ok(v)
    }

    /// A nullable `byte[]`, copied once (one `GetByteArrayRegion`).
    fn bytes(self, a: jni::sys::jbyteArray) -> Result<Option<Vec<u8>>, Fail> {
        if a.is_null() {
            return Ok(None);
        }
        let n = self.len(a)?;
        let mut v: Vec<u8> = Vec::with_capacity(n);
        // SAFETY: `v` has room for `n` bytes; the JVM writes exactly `n` bytes
        // of an array of length `n` (or throws, checked below, and writes none).
        unsafe {
            (self.iface().v1_1.GetByteArrayRegion)(self.0, a, 0, n as i32, v.as_mut_ptr().cast());
        }
        if self.pending() {
            return Err(Fail::Pending);
        }
        // SAFETY: the n bytes were written above.
        unsafe { v.set_len(n) };
        Ok(Some(v))
    }

    /// The address of a direct buffer of exactly [`BUF_LEN`] bytes; 0 for
    /// anything else.
    fn direct_buffer(self, buf: jni::sys::jobject) -> jlong {
        if buf.is_null() {
            return 0;
        }
        let iface = self.iface();
        // SAFETY: `buf` is a live non-null local reference (declared a
        // ByteBuffer); both functions return -1 / null for a buffer that is
        // not direct.
        let (cap, p) = unsafe {
            (
                (iface.v1_4.GetDirectBufferCapacity)(self.0, buf),
                (iface.v1_4.GetDirectBufferAddress)(self.0, buf),
            )
        };
        if cap != BUF_LEN as jlong || p.is_null() {
            return 0;
        }
        p as usize as jlong
    }
}

/// The address of the call's native buffer ([`BUF_LEN`] bytes).
#[derive(Clone, Copy)]
struct Buf(jlong);

impl Buf {
    fn ptr(self) -> Result<*mut u8, Fail> {
        if self.0 == 0 {
            return Err(arg_fail("null native buffer"));
        }
        Ok(self.0 as usize as *mut u8)
    }

    /// The first `n` bytes (at most [`BUF_IN_CAP`]) of the input area.
    fn input<'b>(self, n: usize) -> Result<&'b [u8], Fail> {
        let p = self.ptr()?;
        // SAFETY: a non-zero address is that of the call's direct ByteBuffer
        // of BUF_LEN bytes (Slots.Scratch), which the Java caller keeps
        // reachable during the call and which no other call uses (taken from
        // the pool for this call and given back after it);
        // BUF_IN + n <= BUF_LEN. The slice is dropped before the call returns.
        Ok(unsafe { std::slice::from_raw_parts(p.add(BUF_IN), n) })
    }

    /// The output areas, written in place (no staging copy): the slots
    /// from byte 0 up to [`BUF_TEXT`] (not cleared: [`put_decision`] and
    /// [`put_action`] write every slot of their blocks) and the text area (from
    /// [`BUF_TEXT`], [`TEXT_CAP`] bytes). No buffer (0, for the calls that
    /// return no result: `nativeSent`) gives empty areas.
    fn output<'b>(self) -> Result<(&'b mut [i64], &'b mut [u8]), Fail> {
        if self.0 == 0 {
            return Ok((&mut [], &mut []));
        }
        let p = self.ptr()?;
        if p as usize % std::mem::align_of::<i64>() != 0 {
            return Err(arg_fail("misaligned native buffer"));
        }
        // SAFETY: as in `input` (the buffer holds BUF_LEN bytes, is used by
        // this call only and stays reachable during it); the slots
        // (BUF_TEXT bytes from 0, 8-aligned: checked above) and the text area
        // (TEXT_CAP bytes from BUF_TEXT) are disjoint and end before BUF_IN,
        // so neither overlaps the input slice nor each other. Both slices are
        // dropped before the call returns.
        let (slots, text) = unsafe {
            (
                std::slice::from_raw_parts_mut(p.cast::<i64>(), BUF_TEXT / 8),
                std::slice::from_raw_parts_mut(p.add(BUF_TEXT), TEXT_CAP),
            )
        };
        Ok((slots, text))
    }
}

/// Runs one hot entry point on the raw environment ([`Raw`]): `f` fills
/// `out.slots` and the text, which are the call's native buffer [`Buf`]
/// itself (written in place; the slot count `f` returns is not needed).
/// Returns the status (see the module documentation); errors, panics and
/// objects take the jni crate's path. Nothing unwinds out.
fn hot_raw<F>(env: *mut jni::sys::JNIEnv, buf: Buf, objs: jni::sys::jobjectArray, f: F) -> jint
where
    F: FnOnce(Raw, &mut Out) -> Result<usize, Fail>,
{
    let raw = Raw(env);
    let r = catch_unwind(AssertUnwindSafe(|| -> Result<Objects, Fail> {
        let (slots, text) = buf.output()?;
        let mut out = Out::new(slots, text);
        f(raw, &mut out)?;
        Ok(out.objects)
    }));
    let r = match r {
        Ok(Ok(objects)) if objects.is_empty() => return 0,
        Ok(Err(Fail::Pending)) => return 0,
        Ok(Ok(objects)) => Ok(objects),
        Ok(Err(e)) => Err(Ok(e)),
        Err(payload) => Err(Err(panic_message(payload))),
    };
    // SAFETY: the JVM's JNIEnv pointer of this call (see `Raw`).
    let mut unowned = unsafe { EnvUnowned::from_raw(env) };
    unowned
        .with_env(|env| {
            // SAFETY: the caller's local reference to an Object[].
            let objs = unsafe { JObjectArray::<jni::objects::JObject>::from_raw(env, objs) };
            let fail = match r {
                Ok(objects) => match set_objects(&objects, env, &objs) {
                    Ok(()) => return Ok(0),
                    Err(e) => e,
                },
                Err(Ok(e)) => e,
                Err(Err(message)) => return finish_error(env, &objs, PANIC, None, message),
            };
            finish_fail(env, &objs, fail)
        })
        .resolve::<ThrowRuntimeExAndDefault>()
}

/// Runs `f` on the heartbeat behind `handle`.
fn with_hb<T>(handle: jlong, f: impl FnOnce(&mut Heartbeat) -> Result<T, Fail>) -> Result<T, Fail> {
    if handle == 0 {
        return Err(arg_fail("null heartbeat handle"));
    }
    // SAFETY: a non-zero handle comes from `into_handle` (a value in
    // HANDLES) and the Java side never passes it after `nativeFree` nor
    // concurrently with it.
    let h = unsafe { &*(handle as usize as *const Handle) };
    match h.hb.lock() {
        Ok(mut hb) => f(&mut hb),
        Err(_) => panic!("the heartbeat is unusable after an earlier panic"),
    }
}

fn into_handle(hb: Heartbeat) -> u64 {
    HANDLES.insert(Handle { hb: Mutex::new(hb) }).as_ptr() as usize as u64
}

/// A Java long carrying a u64 bit pattern.
fn u64_of(v: jlong) -> u64 {
    v as u64
}

fn bits(v: u64) -> i64 {
    v as i64
}

/// Writes decision `d` at slot offset `o` and object offset `oo`: every
/// slot of the block (absent values as 0), so the buffer needs no clearing.
fn put_decision(out: &mut Out, o: usize, oo: usize, d: &Decision) -> Result<(), Fail> {
    let s = &mut out.slots[o..o + dec::LEN];
    let (next, what) = match d.next {
        Next::Send(kind) => (0, kind_index(kind)),
        Next::Stop(reason) => (1, reason_index(reason)),
    };
    s[dec::NEXT] = next;
    s[dec::WHAT] = what;
    let mut flags = 0;
    let mut opt = |slot: usize, flag: i64, v: Option<i64>| {
        s[slot] = v.unwrap_or(0);
        if v.is_some() {
            flags |= flag;
        }
    };
    opt(dec::AT, dec::F_AT, d.at_ns.map(bits));
    opt(dec::KEY, dec::F_KEY, d.key.map(key_use_index));
    opt(dec::KEY_INDEX, dec::F_KEY_INDEX, d.key_index.map(i64::from));
    opt(dec::MODE, dec::F_MODE, d.mode.map(mode_index));
    opt(dec::PROVEN, dec::F_PROVEN, d.proven_until_ns.map(bits));
    opt(dec::EXPIRES, dec::F_EXPIRES, d.expires_at_ms.map(bits));
    opt(
        dec::REMAINING,
        dec::F_REMAINING,
        d.remaining_ttl_ms.map(bits),
    );
    s[dec::FLAGS] = flags;
    s[dec::OUTCOME] = outcome_index(d.outcome);
    // The core's packed numbers as they are (no `Num` built per slot).
    let (tags, mags) = d.numbers.packed();
    s[dec::NUM_TAGS] = bits(tags);
    for (slot, &mag) in s[dec::NUMS..dec::NUMS + Numbers::NAMES.len()]
        .iter_mut()
        .zip(mags)
    {
        *slot = bits(mag);
    }
    if d.warnings.len() > dec::MAX_WARN {
        panic!("more than {} warnings in one decision", dec::MAX_WARN);
    }
    s[dec::WARN_COUNT] = d.warnings.len() as i64;
    let warn = &mut s[dec::WARN..dec::WARN + dec::MAX_WARN];
    warn.fill(0);
    for (slot, w) in warn.iter_mut().zip(d.warnings.iter()) {
        *slot = warning_index(w);
    }
    match d.reservation_id.as_deref() {
        None => out.slots[o + dec::RID_LEN] = -1,
        Some(rid) => out.put_text(o + dec::RID_LEN, oo + dec::O_RID, rid, true),
    }
    match d.detail.as_deref() {
        None => out.slots[o + dec::DETAIL_LEN] = -1,
        Some(t) => out.put_text(o + dec::DETAIL_LEN, oo + dec::O_DETAIL, t, true),
    }
    Ok(())
}

/// Writes an action at slot offset `o` and object offset `oo`; the key and
/// body objects only when the attempt is not `known_id`.
fn put_action(
    out: &mut Out,
    o: usize,
    oo: usize,
    action: Action<'_>,
    known_id: u64,
) -> Result<(), Fail> {
    let s = &mut out.slots[o..o + act::LEN];
    let a: &Attempt = match action {
        Action::Send(a) => {
            s[act::TAG] = 0;
            a
        }
        Action::AwaitOutcome(a) => {
            s[act::TAG] = 1;
            a
        }
        Action::Stop(r) => {
            s.fill(0);
            s[act::TAG] = 2;
            s[act::REASON] = reason_index(r);
            s[act::KEY_LEN] = -1;
            s[act::BODY_LEN] = -1;
            return Ok(());
        }
    };
    s[act::REASON] = 0;
    s[act::ID] = bits(a.id);
    s[act::KIND] = kind_index(a.kind);
    s[act::DUE_SET] = i64::from(a.due_ns.is_some());
    s[act::DUE] = bits(a.due_ns.unwrap_or(0));
    s[act::KEY_INDEX] = i64::from(a.key_index);
    s[act::KEY_USE] = key_use_index(a.key_use);
    s[act::SENT_SET] = i64::from(a.sent_ns.is_some());
    s[act::SENT] = bits(a.sent_ns.unwrap_or(0));
    s[act::ZERO_WINDOW] = i64::from(a.is_zero_window_retry());
    if a.id == known_id {
        s[act::KEY_LEN] = -1;
        s[act::BODY_LEN] = -1;
    } else {
        out.put_text(o + act::KEY_LEN, oo + act::O_KEY, &a.key, true);
        out.put_bytes(o + act::BODY_LEN, oo + act::O_BODY, &a.body, false);
    }
    Ok(())
}

// ----- inputs -----

fn parse_failure(code: jint) -> Result<TransportFailure, Fail> {
    match code {
        0 => Ok(TransportFailure::Timeout),
        1 => Ok(TransportFailure::Connect),
        2 => Ok(TransportFailure::Reset),
        _ => Err(arg_fail(&format!("unknown transport failure {code}"))),
    }
}

/// Headers as encoded by Java: u32 count, then per header u32 + name bytes,
/// u32 + value bytes.
fn parse_headers(b: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if b.len() < n {
            return None;
        }
        let (head, tail) = b.split_at(n);
        *b = tail;
        Some(head)
    }
    fn len(b: &mut &[u8]) -> Option<usize> {
        let four: [u8; 4] = take(b, 4)?.try_into().ok()?;
        usize::try_from(u32::from_be_bytes(four)).ok()
    }
    let mut b = b;
    let count = len(&mut b)?;
    let mut out = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let n = len(&mut b)?;
        let name = take(&mut b, n)?.to_vec();
        let n = len(&mut b)?;
        let value = take(&mut b, n)?.to_vec();
        out.push((name, value));
    }
    b.is_empty().then_some(out)
}

/// A nullable `byte[]` argument, copied once (one `GetByteArrayRegion`).
fn opt_bytes(env: &Env<'_>, a: &JByteArray<'_>) -> jni::errors::Result<Option<Vec<u8>>> {
    if a.is_null() {
        Ok(None)
    } else {
        env.convert_byte_array(a).map(Some)
    }
}

/// A nullable UTF-8 `byte[]` argument as a string.
fn opt_text(env: &Env<'_>, a: &JByteArray<'_>, what: &str) -> Result<Option<String>, Fail> {
    match opt_bytes(env, a)? {
        None => Ok(None),
        Some(b) => String::from_utf8(b)
            .map(Some)
            .map_err(|_| arg_fail(&format!("{what} is not valid UTF-8"))),
    }
}

/// Header name/value pairs, owned.
type Headers = Vec<(Vec<u8>, Vec<u8>)>;

/// The headers from their Java encoding (a null array = none).
fn headers_of(headers: Option<Vec<u8>>) -> Result<Headers, Fail> {
    match headers {
        None => Ok(Vec::new()),
        Some(h) => parse_headers(&h).ok_or_else(|| arg_fail("malformed header encoding")),
    }
}

/// An HTTP status from Java (the core checks 100..=999 itself).
fn status_of(status: jint) -> Result<u16, Fail> {
    u16::try_from(status).map_err(|_| {
        arg_fail(&format!(
            "HTTP status must be within 100..=999, got {status}"
        ))
    })
}

/// The core response from the Java arguments (a null headers array = none).
fn response_of(
    status: jint,
    headers: Option<Vec<u8>>,
    body: Option<Vec<u8>>,
    timing_unknown: jboolean,
) -> Result<Response, Fail> {
    let headers = headers_of(headers)?;
    let mut response = Response::new(status_of(status)?);
    response.body = body.unwrap_or_default();
    response.headers = headers;
    if timing_unknown {
        response = response.timing_unknown();
    }
    Ok(response)
}

/// The core configuration from the Java builder's values.
fn config_of(
    ttl_ms: jlong,
    timeout_bits: jlong,
    timeout_unbounded: jboolean,
    create_request: Option<Vec<u8>>,
) -> Result<Config, leasebeat::Error> {
    let mut config = Config::new(
        u64_of(ttl_ms),
        (!timeout_unbounded).then(|| u64_of(timeout_bits)),
    );
    if let Some(json) = create_request {
        match serde_json::from_slice::<Value>(&json) {
            Ok(Value::Object(map)) => config.create_request = map,
            Ok(_) => {
                return Err(leasebeat::Error::new(
                    ErrorKind::InvalidConfig,
                    "createRequestJson must be a JSON object",
                ));
            }
            Err(e) => {
                return Err(leasebeat::Error::new(
                    ErrorKind::InvalidConfig,
                    format!("createRequestJson is not valid JSON: {e}"),
                ));
            }
        }
    }
    Ok(config)
}

/// Sequential keys for a prefix; `None` = the core's UUIDv4 keys.
fn key_source(prefix: Option<String>) -> Option<Box<SequentialKeys>> {
    prefix.map(|p| Box::new(SequentialKeys::new(p)))
}

// ----- the cold calling convention (envelopes) -----

/// A payload writer.
#[derive(Default)]
struct W(Vec<u8>);

impl W {
    fn ok() -> W {
        W(vec![OK])
    }
    fn u8(&mut self, v: u8) -> &mut W {
        self.0.push(v);
        self
    }
    fn bool(&mut self, v: bool) -> &mut W {
        self.u8(u8::from(v))
    }
    fn u32(&mut self, v: u32) -> &mut W {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut W {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn str(&mut self, v: &str) -> &mut W {
        // Lengths above u32::MAX cannot occur: these are short constants.
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(v.as_bytes());
        self
    }
    /// A list of stable strings: u32 count, then each.
    fn strs(&mut self, v: impl ExactSizeIterator<Item = &'static str>) -> &mut W {
        self.u32(v.len() as u32);
        for s in v {
            self.str(s);
        }
        self
    }
    fn num(&mut self, n: Num) -> &mut W {
        match n {
            Num::NegInf => self.u8(0),
            Num::Int(v) => {
                self.u8(1);
                self.0.extend_from_slice(&v.to_be_bytes());
                self
            }
            Num::Inf => self.u8(2),
        }
    }
    /// A u64 duration where `u64::MAX` is +infinity (P-2).
    fn ms(&mut self, v: u64) -> &mut W {
        self.num(Num::from_ms(v))
    }
    /// A plain u64 count or value (never infinite).
    fn count(&mut self, v: u64) -> &mut W {
        self.num(Num::Int(i128::from(v)))
    }
}

fn error_envelope(e: &leasebeat::Error) -> Vec<u8> {
    let mut w = W::default();
    w.u8(ERROR)
        .str(java_code(e.kind()))
        .str(e.kind().code())
        .str(e.message());
    w.0
}

/// Runs one cold entry point: `f` builds the OK envelope; a core error
/// becomes an ERROR envelope, a panic a PANIC envelope, a JNI failure a
/// pending `RuntimeException`.
fn cold<'c, F>(mut unowned: EnvUnowned<'c>, f: F) -> JByteArray<'c>
where
    F: FnOnce(&mut Env<'c>) -> Result<W, Fail>,
{
    unowned
        .with_env(|env| -> jni::errors::Result<JByteArray<'c>> {
            let bytes = match catch_unwind(AssertUnwindSafe(|| f(env))) {
                Ok(Ok(w)) => w.0,
                Ok(Err(Fail::Jni(e))) => return Err(e),
                Ok(Err(Fail::Pending)) => return Err(jni::errors::Error::JavaException),
                Ok(Err(Fail::Core(e))) => error_envelope(&e),
                Ok(Err(Fail::Journal(e))) => journal::error_envelope(&e),
                Err(payload) => {
                    let mut w = W::default();
                    w.u8(PANIC).str(&panic_message(payload));
                    w.0
                }
            };
            env.byte_array_from_slice(&bytes)
        })
        .resolve::<ThrowRuntimeExAndDefault>()
}

fn handle_envelope(hb: Result<Heartbeat, leasebeat::Error>) -> Result<W, Fail> {
    let mut w = W::ok();
    w.u64(into_handle(hb?));
    Ok(w)
}

// ----- entry points: lifecycle -----

/// `static native byte[] nativeNew(long ttlMs, long timeoutBits, boolean
/// timeoutUnbounded, byte[] createRequestJson, byte[] keyPrefix)`: OK payload
/// is the handle (u64).
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeNew<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    ttl_ms: jlong,
    timeout_bits: jlong,
    timeout_unbounded: jboolean,
    create_request: JByteArray<'c>,
    key_prefix: JByteArray<'c>,
) -> JByteArray<'c> {
    cold(env, |env| {
        let create_request = opt_bytes(env, &create_request)?;
        let keys = key_source(opt_text(env, &key_prefix, "keyPrefix")?);
        let config = config_of(ttl_ms, timeout_bits, timeout_unbounded, create_request)?;
        handle_envelope(match keys {
            None => Heartbeat::new(config),
            Some(keys) => Heartbeat::with_key_source(config, keys),
        })
    })
}

/// `static native byte[] nativeForReservation(long ttlMs, long timeoutBits,
/// boolean timeoutUnbounded, byte[] reservationId, byte[] keyPrefix)`: a
/// heartbeat for an existing reservation (`Heartbeat::for_reservation`),
/// whose first action is an immediate extension. OK payload is the handle
/// (u64).
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeForReservation<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    ttl_ms: jlong,
    timeout_bits: jlong,
    timeout_unbounded: jboolean,
    reservation_id: JByteArray<'c>,
    key_prefix: JByteArray<'c>,
) -> JByteArray<'c> {
    cold(env, |env| {
        let reservation_id = opt_text(env, &reservation_id, "reservationId")?
            .ok_or_else(|| arg_fail("reservationId is null"))?;
        let keys = key_source(opt_text(env, &key_prefix, "keyPrefix")?);
        let config = config_of(ttl_ms, timeout_bits, timeout_unbounded, None)?;
        handle_envelope(match keys {
            None => Heartbeat::for_reservation(config, reservation_id),
            Some(keys) => Heartbeat::for_reservation_with_key_source(config, reservation_id, keys),
        })
    })
}

/// `static native int nativeAdopt(long ttlMs, long timeoutBits, boolean
/// timeoutUnbounded, byte[] createRequestJson, byte[] keyPrefix, byte[] key,
/// byte[] requestBody, boolean sentKnown, long sentNs, long receivedNs, int
/// failure, int status, byte[] headers, byte[] body, boolean timingUnknown,
/// long[] slots, Object[] objs, byte[] text)`: `Heartbeat::adopt_create` (failure -1 = a
/// response, else the transport failure code). Result: the first decision
/// and the action from slot 0 ([`DECIDED_LEN`]), then the handle.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeAdopt<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    ttl_ms: jlong,
    timeout_bits: jlong,
    timeout_unbounded: jboolean,
    create_request: JByteArray<'c>,
    key_prefix: JByteArray<'c>,
    key: JByteArray<'c>,
    request_body: JByteArray<'c>,
    sent_known: jboolean,
    sent_ns: jlong,
    received_ns: jlong,
    failure: jint,
    status: jint,
    headers: JByteArray<'c>,
    body: JByteArray<'c>,
    timing_unknown: jboolean,
    slots: JLongArray<'c>,
    objs: JObjectArray<'c>,
    text: JByteArray<'c>,
) -> jint {
    hot(env, slots, objs, text, |env, out| {
        let create_request = opt_bytes(env, &create_request)?;
        let keys = key_source(opt_text(env, &key_prefix, "keyPrefix")?);
        let key = opt_text(env, &key, "the adopted create's key")?
            .ok_or_else(|| arg_fail("the adopted create's key is null"))?;
        let request_body = opt_bytes(env, &request_body)?;
        let config = config_of(ttl_ms, timeout_bits, timeout_unbounded, create_request)?;
        let outcome = if failure < 0 {
            CreateOutcome::Response(response_of(
                status,
                opt_bytes(env, &headers)?,
                opt_bytes(env, &body)?,
                timing_unknown,
            )?)
        } else {
            CreateOutcome::Failure(parse_failure(failure)?)
        };
        let create = AdoptedCreate {
            key,
            body: request_body,
            sent_ns: sent_known.then(|| u64_of(sent_ns)),
            received_ns: u64_of(received_ns),
            outcome,
        };
        let (hb, first) = match keys {
            None => Heartbeat::adopt_create(config, create)?,
            Some(keys) => Heartbeat::adopt_create_with_key_source(config, create, keys)?,
        };
        put_decided(out, &hb, &first, 0)?;
        out.slots[ADOPT_HANDLE] = bits(into_handle(hb));
        Ok(ADOPT_HANDLE + 1)
    })
}

/// `static native void nativeFree(long handle)`: frees a handle; 0 is a no-op.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeFree<'c>(
    _env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
) {
    if handle == 0 {
        return;
    }
    let _ = catch_unwind(|| {
        let Some(p) = NonNull::new(handle as usize as *mut Handle) else {
            return;
        };
        // SAFETY: see `with_hb`; the Java side frees each handle exactly once,
        // with no call inside. Dropped here, outside the pool's lock.
        drop(unsafe { HANDLES.remove(p) });
    });
}

// ----- entry points: events -----

/// `static native int nativeSent(long handle, long attemptId, long nowNs,
/// Object[] objs)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeSent(
    env: *mut jni::sys::JNIEnv,
    _class: jni::sys::jclass,
    handle: jlong,
    attempt_id: jlong,
    now_ns: jlong,
    objs: jni::sys::jobjectArray,
) -> jint {
    hot_raw(env, Buf(0), objs, |_, _| {
        with_hb(handle, |hb| {
            hb.handle_sent(u64_of(attempt_id), u64_of(now_ns))?;
            Ok(0)
        })
    })
}

/// Runs a decision-returning event on the heartbeat and writes the decision.
fn decide(
    out: &mut Out,
    handle: jlong,
    known_attempt_id: jlong,
    f: impl FnOnce(&mut Heartbeat) -> Result<Decision, leasebeat::Error>,
) -> Result<usize, Fail> {
    with_hb(handle, |hb| {
        let d = f(hb)?;
        put_decided(out, hb, &d, known_attempt_id)
    })
}

/// As [`decide`], for a call that records its decision in the heartbeat
/// and lends it (`handle_response_ref`): written from the stored decision,
/// no clone.
fn decide_stored(
    out: &mut Out,
    handle: jlong,
    known_attempt_id: jlong,
    f: impl FnOnce(&mut Heartbeat) -> Result<(), leasebeat::Error>,
) -> Result<usize, Fail> {
    with_hb(handle, |hb| {
        f(hb)?;
        let d = hb
            .last_decision()
            .ok_or_else(|| arg_fail("the core recorded no decision"))?;
        put_decided(out, hb, d, known_attempt_id)
    })
}

/// Writes a decision and the action it leaves ([`DECIDED_LEN`]).
fn put_decided(
    out: &mut Out,
    hb: &Heartbeat,
    d: &Decision,
    known_attempt_id: jlong,
) -> Result<usize, Fail> {
    put_decision(out, 0, 0, d)?;
    let action = hb.poll_action();
    put_action(
        out,
        dec::LEN,
        DECIDED_O_ACTION,
        action,
        u64_of(known_attempt_id),
    )?;
    Ok(DECIDED_LEN)
}

/// `static native int nativeResponse(long handle, long attemptId, int
/// status, byte[] headers, byte[] body, int bodyLen, boolean timingUnknown,
/// long nowNs, long knownAttemptId, long buf, Object[] objs)`: headers null =
/// none; the body is `body` when `bodyLen` < 0, else the first `bodyLen`
/// bytes of the input area of the call's native buffer `buf` ([`Buf`]).
/// Result: the decision and the action ([`DECIDED_LEN`]) in `buf`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeResponse(
    env: *mut jni::sys::JNIEnv,
    _class: jni::sys::jclass,
    handle: jlong,
    attempt_id: jlong,
    status: jint,
    headers: jni::sys::jbyteArray,
    body: jni::sys::jbyteArray,
    body_len: jint,
    timing_unknown: jboolean,
    now_ns: jlong,
    known_attempt_id: jlong,
    buf: jlong,
    objs: jni::sys::jobjectArray,
) -> jint {
    let buf = Buf(buf);
    hot_raw(env, buf, objs, |raw, out| {
        let headers = headers_of(raw.bytes(headers)?)?;
        // The body is borrowed where it lies (the core copies nothing): the
        // buffer's input area, or a copy of the array for a longer one.
        let owned;
        let body: &[u8] = match usize::try_from(body_len) {
            Err(_) => {
                owned = raw.bytes(body)?.unwrap_or_default();
                &owned
            }
            Ok(n) if n <= BUF_IN_CAP => buf.input(n)?,
            Ok(_) => return Err(arg_fail("body length beyond the input buffer")),
        };
        let mut response = ResponseRef::new(status_of(status)?, body).headers(&headers);
        if timing_unknown {
            response = response.timing_unknown();
        }
        decide_stored(out, handle, known_attempt_id, |hb| {
            hb.handle_response_ref(u64_of(attempt_id), response, u64_of(now_ns))
                .map(|_| ())
        })
    })
}

/// `static native int nativeFailure(long handle, long attemptId, int
/// failure, long nowNs, long knownAttemptId, long buf, Object[] objs)`:
/// failure 0 = timeout, 1 = connect, 2 = reset. Result as `nativeResponse`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeFailure(
    env: *mut jni::sys::JNIEnv,
    _class: jni::sys::jclass,
    handle: jlong,
    attempt_id: jlong,
    failure: jint,
    now_ns: jlong,
    known_attempt_id: jlong,
    buf: jlong,
    objs: jni::sys::jobjectArray,
) -> jint {
    hot_raw(env, Buf(buf), objs, |_, out| {
        let failure = parse_failure(failure)?;
        decide(out, handle, known_attempt_id, |hb| {
            hb.handle_failure(u64_of(attempt_id), failure, u64_of(now_ns))
        })
    })
}

/// `static native int nativeCancel(long handle, long nowNs, long
/// knownAttemptId, long buf, Object[] objs)`. Result as `nativeResponse`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeCancel(
    env: *mut jni::sys::JNIEnv,
    _class: jni::sys::jclass,
    handle: jlong,
    now_ns: jlong,
    known_attempt_id: jlong,
    buf: jlong,
    objs: jni::sys::jobjectArray,
) -> jint {
    hot_raw(env, Buf(buf), objs, |_, out| {
        decide(out, handle, known_attempt_id, |hb| {
            hb.cancel(u64_of(now_ns))
        })
    })
}

// ----- entry points: polls -----

/// `static native int nativePoll(long handle, long knownAttemptId, long buf,
/// Object[] objs)`: the action ([`act`]) in `buf`; the key and body only for
/// an attempt other than `knownAttemptId`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativePoll(
    env: *mut jni::sys::JNIEnv,
    _class: jni::sys::jclass,
    handle: jlong,
    known_attempt_id: jlong,
    buf: jlong,
    objs: jni::sys::jobjectArray,
) -> jint {
    hot_raw(env, Buf(buf), objs, |_, out| {
        with_hb(handle, |hb| {
            put_action(out, 0, 0, hb.poll_action(), u64_of(known_attempt_id))?;
            Ok(act::LEN)
        })
    })
}

/// `static native long nativeBufferAddress(java.nio.ByteBuffer buf)`: the
/// address of a direct buffer of exactly [`BUF_LEN`] bytes, for the hot
/// calls' `buf` argument ([`Buf`]); 0 for anything else.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeBufferAddress(
    env: *mut jni::sys::JNIEnv,
    _class: jni::sys::jclass,
    buf: jni::sys::jobject,
) -> jlong {
    Raw(env).direct_buffer(buf)
}

/// `static native int nativeState(long handle, long knownAttemptId, long[]
/// slots, Object[] objs, byte[] text)`: the action, reservation id, mode, max rtt, last
/// event and last decision ([`state`]).
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeState<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
    known_attempt_id: jlong,
    slots: JLongArray<'c>,
    objs: JObjectArray<'c>,
    text: JByteArray<'c>,
) -> jint {
    hot(env, slots, objs, text, |_, out| {
        with_hb(handle, |hb| {
            put_action(out, 0, 0, hb.poll_action(), u64_of(known_attempt_id))?;
            out.slots[state::MODE] = hb.mode().map_or(-1, mode_index);
            out.slots[state::MAX_RTT] = bits(hb.max_rtt_ms());
            out.slots[state::LAST_EVENT] = bits(hb.last_event_ns());
            if let Some(rid) = hb.reservation_id() {
                out.objects
                    .push((state::O_RID, rid.as_bytes().to_vec(), true));
            }
            if let Some(d) = hb.last_decision() {
                out.slots[state::HAS_LAST] = 1;
                let o = state::DECISION;
                put_decision(out, o, state::O_DECISION, d)?;
            }
            Ok(state::LEN)
        })
    })
}

/// `static native String nativeDecisionJson(long[] slots, String
/// reservationId, String detail)`: the core's JSON of the decision Java
/// decoded from these slots ([`dec`], offset 0), written only on demand
/// (`Decision.toJson()`). Null with a pending exception if the slots are not
/// a decision.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeDecisionJson<'c>(
    mut unowned: EnvUnowned<'c>,
    _class: JClass<'c>,
    slots: JLongArray<'c>,
    reservation_id: JString<'c>,
    detail: JString<'c>,
) -> JString<'c> {
    unowned
        .with_env(|env| -> jni::errors::Result<JString<'c>> {
            let mut s = [0i64; dec::LEN];
            slots.get_region(env, 0, &mut s)?;
            let text = |j: &JString<'_>| -> jni::errors::Result<Option<String>> {
                if j.is_null() {
                    Ok(None)
                } else {
                    j.try_to_string(env).map(Some)
                }
            };
            let rid = text(&reservation_id)?;
            let detail = text(&detail)?;
            let json = catch_unwind(AssertUnwindSafe(|| {
                decision_of(&s, rid, detail).map(|d| d.to_json_string())
            }));
            match json {
                Ok(Some(json)) => env.new_string(json),
                _ => Err(jni::errors::Error::JniCall(
                    jni::errors::JniError::InvalidArguments,
                )),
            }
        })
        .resolve::<ThrowRuntimeExAndDefault>()
}

/// The core decision written by [`put_decision`] at offset 0 of `s`.
fn decision_of(
    s: &[i64],
    reservation_id: Option<String>,
    detail: Option<String>,
) -> Option<Decision> {
    fn at<T: Copy>(all: &[T], i: i64) -> Option<T> {
        all.get(usize::try_from(i).ok()?).copied()
    }
    let flags = s[dec::FLAGS];
    let opt = |slot: usize, flag: i64| (flags & flag != 0).then_some(s[slot]);
    let next = match s[dec::NEXT] {
        0 => Next::Send(at(KINDS, s[dec::WHAT])?),
        _ => Next::Stop(at(&StopReason::ALL, s[dec::WHAT])?),
    };
    let mut mags = [0u64; 14];
    for (m, &v) in mags.iter_mut().zip(&s[dec::NUMS..dec::NUMS + 14]) {
        *m = v as u64;
    }
    let numbers = Numbers::from_packed(s[dec::NUM_TAGS] as u64, mags)?;
    let count = usize::try_from(s[dec::WARN_COUNT]).ok()?.min(dec::MAX_WARN);
    let warnings = s[dec::WARN..dec::WARN + count]
        .iter()
        .map(|&i| at(WARNINGS, i))
        .collect::<Option<Warnings>>()?;
    Some(Decision {
        reservation_id: reservation_id.map(Arc::from),
        next,
        at_ns: opt(dec::AT, dec::F_AT).map(|v| v as u64),
        key: match opt(dec::KEY, dec::F_KEY) {
            None => None,
            Some(i) => Some(at(KEY_USES, i)?),
        },
        key_index: match opt(dec::KEY_INDEX, dec::F_KEY_INDEX) {
            None => None,
            Some(i) => Some(u32::try_from(i).ok()?),
        },
        mode: match opt(dec::MODE, dec::F_MODE) {
            None => None,
            Some(i) => Some(at(MODES, i)?),
        },
        numbers,
        warnings,
        outcome: at(OUTCOMES, s[dec::OUTCOME])?,
        detail,
        proven_until_ns: opt(dec::PROVEN, dec::F_PROVEN).map(|v| v as u64),
        expires_at_ms: opt(dec::EXPIRES, dec::F_EXPIRES).map(|v| v as u64),
        remaining_ttl_ms: opt(dec::REMAINING, dec::F_REMAINING).map(|v| v as u64),
    })
}

// ----- entry points: catalog and test hooks -----

/// `static native byte[] nativeCatalog()`: the core's error kinds and stop
/// reasons as (Java constant, stable string) pairs, the core version, then
/// the index tables of the hot convention as lists of stable strings:
/// attempt kinds, key uses, modes, warnings, outcome classes, number names.
/// A PANIC if the number order is inconsistent (a bug of this file).
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeCatalog<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
) -> JByteArray<'c> {
    cold(env, |_| {
        assert!(
            numbers_order_ok(),
            "the numbers' order differs from Numbers::NAMES"
        );
        let mut w = W::ok();
        w.u32(ErrorKind::ALL.len() as u32);
        for kind in ErrorKind::ALL {
            w.str(java_code(kind)).str(kind.code());
        }
        w.u32(StopReason::ALL.len() as u32);
        for reason in StopReason::ALL {
            w.str(java_reason(reason)).str(reason.as_str());
        }
        w.str(env!("CARGO_PKG_VERSION"));
        w.strs(KINDS.iter().map(|v| v.as_str()))
            .strs(KEY_USES.iter().map(|v| v.as_str()))
            .strs(MODES.iter().map(|v| v.as_str()))
            .strs(WARNINGS.iter().map(|v| v.as_str()))
            .strs(OUTCOMES.iter().map(|v| v.as_str()))
            .strs(Numbers::NAMES.iter().copied());
        Ok(w)
    })
}

/// `static native byte[] nativePanic()`: panics on purpose, so tests can see
/// a panic arrive as `LeaseException(Code.PANIC)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativePanic<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
) -> JByteArray<'c> {
    cold(env, |_| -> Result<W, Fail> {
        panic!("deliberate panic for the binding's tests")
    })
}

// ----- entry points: pure arithmetic -----

/// `static native byte[] nativeMath(int op, long a, long b, long c, long d,
/// boolean flagA, boolean flagB)`: the pure functions of `leasebeat::arith`.
/// Arguments are u64 bit patterns (or i64 for the signed fallback inputs);
/// the Java side validates them first. Ops:
/// 0 ceil_ms(a); 1 attempt_budget(b ? None : a, c); 2 safety_margin(a);
/// 3 retry_reserve(a, b); 4 primary_schedule(a, flagA ? None : b, flagB ?
/// None : c, d); 5 retry_window(a, b, c, d); 6 hold_cadence(a);
/// 7 fallback_cadence(a as i64, b, c); 8 fallback_skips(a as i64, b as i64, c).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeMath<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    op: jint,
    a: jlong,
    b: jlong,
    c: jlong,
    d: jlong,
    flag_a: jboolean,
    flag_b: jboolean,
) -> JByteArray<'c> {
    cold(env, |_| {
        let (ua, ub, uc, ud) = (u64_of(a), u64_of(b), u64_of(c), u64_of(d));
        let mut w = W::ok();
        match op {
            0 => {
                w.count(arith::ceil_ms(ua));
            }
            1 => {
                w.ms(arith::attempt_budget((!flag_b).then_some(ua), uc));
            }
            2 => {
                w.ms(arith::safety_margin(ua));
            }
            3 => {
                w.ms(arith::retry_reserve(ua, ub));
            }
            4 => {
                let s = arith::primary_schedule(
                    ua,
                    (!flag_a).then_some(ub),
                    (!flag_b).then_some(uc),
                    ud,
                );
                w.ms(s.lead_floor)
                    .ms(s.attempt_budget)
                    .ms(s.safety_margin)
                    .ms(s.retry_reserve)
                    .ms(s.next_delay);
            }
            5 => {
                let r = arith::retry_window(ua, ub, uc, ud);
                w.ms(r.lead).num(r.window);
                match r.delay {
                    None => w.u8(0),
                    Some(delay) => w.u8(1).ms(delay),
                };
            }
            6 => {
                w.ms(arith::hold_cadence(ua));
            }
            7 => {
                let f = arith::fallback_cadence(i128::from(a), ub, uc);
                w.ms(f.cadence).bool(f.hold);
            }
            8 => {
                w.count(arith::fallback_skips(i128::from(a), i128::from(b), uc));
            }
            _ => return Err(arg_fail(&format!("unknown arithmetic operation {op}"))),
        }
        Ok(w)
    })
}

/// `static native byte[] nativeRetryAfter(byte[] values)`: values encoded like
/// headers' values (u32 count, then u32 length + bytes each). OK payload: u8 0
/// then the milliseconds as a num, or u8 1 then the problem's stable string.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeRetryAfter<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    values: JByteArray<'c>,
) -> JByteArray<'c> {
    cold(env, |env| {
        let raw = opt_bytes(env, &values)?.unwrap_or_default();
        // Reuse the header decoder: values are encoded as (value, empty) pairs.
        let pairs =
            parse_headers(&raw).ok_or_else(|| arg_fail("malformed Retry-After value encoding"))?;
        let values: Vec<&[u8]> = pairs.iter().map(|(v, _)| v.as_slice()).collect();
        let mut w = W::ok();
        match arith::parse_retry_after(&values) {
            Ok(ms) => {
                w.u8(0).count(ms);
            }
            Err(e) => {
                w.u8(1).str(e.as_str());
            }
        }
        Ok(w)
    })
}

// ----- benchmark hook -----

/// `static native double nativeBenchCore(int n, int batches, int mode)`: the benchmark's timed region in Rust alone, in this process
/// (scripts/bench-jvm.sh): per batch, `n` heartbeats in the core bench's
/// state (create answered, first extend in flight; not timed), then
/// `handle_response_ref(200 extend body)` + `poll_action` on each (timed):
/// the calls the Java path makes (`nativeResponse`), borrowed body, lent
/// decision.
/// Mode 0: the heartbeats side by side in one `Vec` (as the core's criterion
/// bench); 1: each behind its own `Box` and lock, as a Java handle; 2: as 0,
/// with the caches flushed before the timed loop (64 MiB written), as the GC
/// does for the Java loop.
/// Returns the median ns per operation over the batches, or -1 if the
/// fixture failed.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeBenchCore<'c>(
    _env: EnvUnowned<'c>,
    _class: JClass<'c>,
    n: jint,
    batches: jint,
    mode: jint,
) -> f64 {
    catch_unwind(|| bench_core(n.max(1) as usize, batches.max(1) as usize, mode)).unwrap_or(-1.0)
}

/// This thread's CPU time in ns (the benchmark's clock: time this thread
/// waited while other processes ran is not counted; DecisionBench times the
/// Java loops with the same clock through `ThreadMXBean`). Wall time where
/// the thread clock is not available here.
fn bench_clock() -> u64 {
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    {
        #[repr(C)]
        struct Timespec {
            sec: i64,
            nsec: i64,
        }
        unsafe extern "C" {
            fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
        }
        const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
        let mut ts = Timespec { sec: 0, nsec: 0 };
        // SAFETY: `ts` is a valid timespec (two 64-bit fields on 64-bit Linux).
        if unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
            return (ts.sec as u64) * 1_000_000_000 + ts.nsec as u64;
        }
    }
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

const BENCH_EXTEND: &[u8] =
    br#"{"status":"ACTIVE","expires_at_ms":1785585720000,"remaining_ttl_ms":60000}"#;

/// `static native long nativeBenchPrepare(int n)`: a batch of `n` Rust-made
/// heartbeats in the bench state, side by side in a `Vec`, for
/// [`Java_io_leasebeat_NativeBridge_nativeBenchRun`] (0 if the fixture
/// failed). Lets the Java side run the same GC between setup and timing as
/// for its own batches.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeBenchPrepare(
    _env: *mut jni::sys::JNIEnv,
    _class: jni::sys::jclass,
    n: jint,
) -> jlong {
    catch_unwind(|| {
        (0..n.max(1))
            .map(|_| bench_in_flight())
            .collect::<Option<Vec<_>>>()
            .map_or(0, |v| Box::into_raw(Box::new(v)) as usize as jlong)
    })
    .unwrap_or(0)
}

/// `static native double nativeBenchRun(long batch, int[] order)`: the timed
/// region on a batch from `nativeBenchPrepare`, which it frees: ns per
/// operation (-1 if `order` is not a permutation of the batch). The
/// heartbeats are visited in `order` (their indices in the batch), or side
/// by side in address order when it is null.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeBenchRun(
    env: *mut jni::sys::JNIEnv,
    _class: jni::sys::jclass,
    batch: jlong,
    order: jni::sys::jintArray,
) -> f64 {
    if batch == 0 {
        return -1.0;
    }
    // SAFETY: a non-zero value comes from `nativeBenchPrepare`, run once.
    let mut hbs = unsafe { Box::from_raw(batch as usize as *mut Vec<(Heartbeat, u64)>) };
    let raw = Raw(env);
    catch_unwind(AssertUnwindSafe(|| {
        let order: Vec<usize> = if order.is_null() {
            (0..hbs.len()).collect()
        } else {
            let Ok(v) = raw.ints(order) else {
                return -1.0;
            };
            let mut seen = vec![false; hbs.len()];
            let mut ix = Vec::with_capacity(v.len());
            for i in v {
                match usize::try_from(i)
                    .ok()
                    .filter(|&i| i < hbs.len() && !seen[i])
                {
                    Some(i) => {
                        seen[i] = true;
                        ix.push(i);
                    }
                    None => return -1.0,
                }
            }
            if ix.len() != hbs.len() {
                return -1.0;
            }
            ix
        };
        let t0 = bench_clock();
        for &i in &order {
            let (hb, id) = &mut hbs[i];
            let d = hb.handle_response_ref(
                *id,
                ResponseRef::new(200, BENCH_EXTEND),
                38_600 * 1_000_000,
            );
            std::hint::black_box(&d);
            std::hint::black_box(hb.poll_action());
        }
        (bench_clock() - t0) as f64 / hbs.len().max(1) as f64
    }))
    .unwrap_or(-1.0)
}

fn bench_in_flight() -> Option<(Heartbeat, u64)> {
    const MS: u64 = 1_000_000;
    const CREATE: &[u8] = br#"{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:acme"],"expires_at_ms":1785585660000,"remaining_ttl_ms":61500}"#;
    let mut hb = Heartbeat::with_key_source(
        Config::new(60_000, Some(10_000)),
        Box::new(SequentialKeys::new("k")),
    )
    .ok()?;
    let id = hb.attempt()?.id;
    hb.handle_sent(id, 0).ok()?;
    hb.handle_response(id, Response::new(200).body(CREATE), 1_500 * MS)
        .ok()?;
    let id = hb.attempt()?.id;
    hb.handle_sent(id, 38_500 * MS).ok()?;
    Some((hb, id))
}

fn bench_core(n: usize, batches: usize, mode: jint) -> f64 {
    const MS: u64 = 1_000_000;
    let in_flight = bench_in_flight;
    let mut per_batch = Vec::with_capacity(batches);
    for _ in 0..batches {
        let elapsed = if mode == 1 {
            let Some(hbs) = (0..n)
                .map(|_| in_flight().map(|(hb, id)| (Box::new(Handle { hb: Mutex::new(hb) }), id)))
                .collect::<Option<Vec<_>>>()
            else {
                return -1.0;
            };
            let t0 = bench_clock();
            for (h, id) in &hbs {
                let Ok(mut hb) = h.hb.lock() else {
                    return -1.0;
                };
                let d =
                    hb.handle_response_ref(*id, ResponseRef::new(200, BENCH_EXTEND), 38_600 * MS);
                std::hint::black_box(&d);
                std::hint::black_box(hb.poll_action());
            }
            bench_clock() - t0
        } else {
            let Some(mut hbs) = (0..n).map(|_| in_flight()).collect::<Option<Vec<_>>>() else {
                return -1.0;
            };
            if mode == 2 {
                let mut flush = vec![0u8; 64 << 20];
                for (i, b) in flush.iter_mut().enumerate().step_by(64) {
                    *b = i as u8;
                }
                std::hint::black_box(&flush);
            }
            let t0 = bench_clock();
            for (hb, id) in &mut hbs {
                let d =
                    hb.handle_response_ref(*id, ResponseRef::new(200, BENCH_EXTEND), 38_600 * MS);
                std::hint::black_box(&d);
                std::hint::black_box(hb.poll_action());
            }
            bench_clock() - t0
        };
        per_batch.push(elapsed as f64 / n as f64);
    }
    per_batch.sort_by(f64::total_cmp);
    per_batch[per_batch.len() / 2]
}

/// `static native double nativeBenchHandles(long[] handles, long[] ids, long
/// nowNs)`: the benchmark's timed region in Rust alone, but on heartbeats
/// made through the Java API (their handles, each with attempt `ids[i]` in
/// flight): `handle_response_ref(200 extend body)` + `poll_action` on each, in
/// one Rust loop with no JNI crossing per operation. Returns ns per
/// operation, or -1. Tells the cost of where those heartbeats lie in memory
/// apart from the cost of entering the core from Java once per operation.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeBenchHandles(
    env: *mut jni::sys::JNIEnv,
    _class: jni::sys::jclass,
    handles: jni::sys::jlongArray,
    ids: jni::sys::jlongArray,
    now_ns: jlong,
) -> f64 {
    let raw = Raw(env);
    let longs = |a: jni::sys::jlongArray| -> Option<Vec<i64>> {
        let n = raw.len(a).ok()?;
        let mut v = vec![0i64; n];
        // SAFETY: `v` holds `n` longs, the array's length.
        unsafe { (raw.iface().v1_1.GetLongArrayRegion)(raw.0, a, 0, n as i32, v.as_mut_ptr()) };
        (!raw.pending()).then_some(v)
    };
    catch_unwind(AssertUnwindSafe(|| {
        let (Some(handles), Some(ids)) = (longs(handles), longs(ids)) else {
            return -1.0;
        };
        if handles.len() != ids.len() || handles.is_empty() {
            return -1.0;
        }
        let t0 = bench_clock();
        for (&h, &id) in handles.iter().zip(&ids) {
            let r = with_hb(h, |hb| {
                let d = hb.handle_response_ref(
                    u64_of(id),
                    ResponseRef::new(200, BENCH_EXTEND),
                    u64_of(now_ns),
                );
                std::hint::black_box(&d);
                std::hint::black_box(hb.poll_action());
                Ok(())
            });
            if r.is_err() {
                return -1.0;
            }
        }
        (bench_clock() - t0) as f64 / handles.len() as f64
    }))
    .unwrap_or(-1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_inserted_and_freed_through_the_entry_points_helpers() {
        let hb = Heartbeat::new(Config::new(60_000, Some(10_000))).expect("a valid config");
        let h = into_handle(hb) as jlong;
        assert_eq!(h % 64, 0, "a handle starts on a cache line");
        let Ok(id) = with_hb(h, |hb| Ok(hb.attempt().expect("the create").id)) else {
            panic!("a live handle");
        };
        let sent = with_hb(h, |hb| Ok(hb.handle_sent(id, 0)?));
        assert!(sent.is_ok());
        // SAFETY: from into_handle, freed once, nothing else uses it.
        drop(unsafe { HANDLES.remove(NonNull::new(h as usize as *mut Handle).expect("non-null")) });
    }
}
