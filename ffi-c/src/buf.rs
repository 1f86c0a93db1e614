//! Pointer checks and the caller-buffer convention, in one place.
//!
//! Every function here is `unsafe` for the same reason: it trusts the caller's
//! promise that a non-NULL pointer is valid for the stated access. NULL is
//! always detected and turned into `LB_STATUS_NULL_ARGUMENT`.

use std::ffi::{CStr, c_char};

use crate::error::{Fail, lb_status};

/// `p` as a shared reference, or a NULL-argument refusal.
///
/// # Safety
/// `p` is NULL or points to a live, properly aligned `T` not mutated while
/// the reference is in use.
pub(crate) unsafe fn try_ref<'a, T>(p: *const T, what: &str) -> Result<&'a T, Fail> {
    // SAFETY: the caller's promise; `as_ref` handles NULL.
    unsafe { p.as_ref() }.ok_or_else(|| Fail::null(what))
}

/// `p` as an exclusive reference, or a NULL-argument refusal.
///
/// # Safety
/// `p` is NULL or points to a live, properly aligned `T` not accessed by
/// anyone else while the reference is in use.
pub(crate) unsafe fn try_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, Fail> {
    // SAFETY: the caller's promise; `as_mut` handles NULL.
    unsafe { p.as_mut() }.ok_or_else(|| Fail::null(what))
}

/// Checks that an out-pointer is not NULL, before any work is done.
pub(crate) fn check_out<T>(p: *mut T, what: &str) -> Result<(), Fail> {
    if p.is_null() {
        Err(Fail::null(what))
    } else {
        Ok(())
    }
}

/// Writes `value` through an out-pointer already checked by [`check_out`].
///
/// # Safety
/// `p` is non-NULL, aligned and valid for one write of `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, value: T) {
    // SAFETY: the caller's promise; `write` does not drop the old contents,
    // which may be uninitialized.
    unsafe { p.write(value) }
}

/// `(p, len)` as a slice. NULL is accepted only with `len == 0`.
///
/// # Safety
/// `p` is NULL or valid for reads of `len` elements of `T` that are not
/// mutated while the slice is in use.
pub(crate) unsafe fn try_slice<'a, T>(
    p: *const T,
    len: usize,
    what: &str,
) -> Result<&'a [T], Fail> {
    // SAFETY: forwarded; the caller's promise is the same.
    unsafe { try_slice_named(p, len, || what.to_owned()) }
}

/// [`try_slice`] whose argument name is built only for an error message (no
/// formatting on the hot path).
///
/// # Safety
/// As [`try_slice`].
#[inline]
pub(crate) unsafe fn try_slice_named<'a, T>(
    p: *const T,
    len: usize,
    what: impl FnOnce() -> String,
) -> Result<&'a [T], Fail> {
    if p.is_null() {
        if len == 0 {
            return Ok(&[]);
        }
        return Err(null_slice(what(), len));
    }
    if len > isize::MAX as usize / std::mem::size_of::<T>().max(1) {
        return Err(long_slice(what(), len));
    }
    // SAFETY: non-NULL, and the caller promises `len` readable elements.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// The refusal of a NULL pointer with a length (out of the hot path).
#[cold]
#[inline(never)]
fn null_slice(what: String, len: usize) -> Fail {
    Fail::null(&format!("{what} (with a length of {len})"))
}

/// The refusal of a length no slice can have (out of the hot path).
#[cold]
#[inline(never)]
fn long_slice(what: String, len: usize) -> Fail {
    Fail::invalid(format!("{what}: length {len} is too large"))
}

/// A NUL-terminated string argument as UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays unchanged while
/// the result is in use.
pub(crate) unsafe fn try_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(Fail::null(what));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's promise.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    std::str::from_utf8(bytes).map_err(|e| {
        Fail::new(
            lb_status::InvalidUtf8,
            format!("{what} is not valid UTF-8 (at byte {})", e.valid_up_to()),
        )
    })
}

/// A string argument given as a pointer and a length (it may contain NUL
/// bytes), as UTF-8. NULL is accepted only with `len == 0`.
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes that stay unchanged while
/// the result is in use.
pub(crate) unsafe fn try_str_len<'a>(
    p: *const c_char,
    len: usize,
    what: &str,
) -> Result<&'a str, Fail> {
    // SAFETY: forwarded caller promise.
    let bytes = unsafe { try_slice(p.cast::<u8>(), len, what) }?;
    std::str::from_utf8(bytes).map_err(|e| {
        Fail::new(
            lb_status::InvalidUtf8,
            format!("{what} is not valid UTF-8 (at byte {})", e.valid_up_to()),
        )
    })
}

/// The caller-buffer convention for bytes (`nul` false) and text (`nul`
/// true, a terminating NUL is added and counted in the needed size).
///
/// * `out_needed` NULL: `LB_STATUS_NULL_ARGUMENT`, nothing written.
/// * `buf` NULL or `buf_len` 0: a size query; `*out_needed` written, OK.
/// * `buf_len` < needed: `*out_needed` written, `LB_STATUS_BUFFER_TOO_SMALL`,
///   `buf` untouched.
/// * otherwise: data copied, `*out_needed` written, OK.
///
/// # Safety
/// `buf` is NULL or valid for writes of `buf_len` bytes; `out_needed` is NULL
/// or valid for one write.
unsafe fn copy_out(
    data: &[u8],
    nul: bool,
    buf: *mut u8,
    buf_len: usize,
    out_needed: *mut usize,
) -> Result<(), Fail> {
    check_out(out_needed, "out_needed")?;
    let needed = data.len() + usize::from(nul);
    // SAFETY: checked non-NULL above; the caller promises it is writable.
    unsafe { write_out(out_needed, needed) };
    if buf.is_null() || buf_len == 0 {
        return Ok(());
    }
    if buf_len < needed {
        return Err(Fail::new(
            lb_status::BufferTooSmall,
            format!("the buffer holds {buf_len} bytes but {needed} are needed"),
        ));
    }
    // SAFETY: `buf` is valid for `buf_len >= needed` bytes and cannot overlap
    // `data`, which the library owns.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), buf, data.len());
        if nul {
            buf.add(data.len()).write(0);
        }
    }
    Ok(())
}

/// [`copy_out`] for text.
///
/// # Safety
/// As for [`copy_out`].
pub(crate) unsafe fn copy_text(
    text: &[u8],
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> Result<(), Fail> {
    // SAFETY: forwarded caller promise.
    unsafe { copy_out(text, true, buf.cast(), buf_len, out_needed) }
}

/// [`copy_out`] for bytes.
///
/// # Safety
/// As for [`copy_out`].
pub(crate) unsafe fn copy_bytes(
    data: &[u8],
    buf: *mut u8,
    buf_len: usize,
    out_needed: *mut usize,
) -> Result<(), Fail> {
    // SAFETY: forwarded caller promise.
    unsafe { copy_out(data, false, buf, buf_len, out_needed) }
}
