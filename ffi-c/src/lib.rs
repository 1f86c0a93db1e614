//! # leasebeat C ABI
//!
//! `libleasebeat.so` / `libleasebeat.a` and `include/leasebeat.h` (generated
//! from this crate by cbindgen; `ffi-c/tests/header.rs` fails when the
//! committed header drifts). A thin layer over the `leasebeat` core in the
//! style of rustls-ffi:
//!
//! * every name starts with `lb_`; handles are opaque (`lb_config`,
//!   `lb_heartbeat`, `lb_decision`), made by `*_new`/getters and freed by
//!   `*_free` (`*_free(NULL)` is a no-op);
//! * fallible functions return `lb_status` (`LB_STATUS_OK` = 0); out-params are
//!   written only on success (the needed size also on
//!   `LB_STATUS_BUFFER_TOO_SMALL`); every pointer is checked
//!   (`LB_STATUS_NULL_ARGUMENT`); every export runs inside a panic boundary
//!   (`LB_STATUS_PANIC`);
//! * a thread-local last-error message explains the last failure
//!   (`lb_last_error`).
//!
//! Modules: [`error`] (status, last error, panic boundary), [`buf`] (pointer
//! checks and the caller-buffer convention), [`types`] (plain value types),
//! [`heartbeat`] (configuration and state machine), [`decision`] (decisions),
//! [`arith`] (the pure arithmetic), [`settlement`] (the settlement of a
//! reservation), [`journal`] (the durable settlement journal), `driver` (the HTTP driver with its event
//! callback; cargo feature `driver`, on by default). Unsafe code lives only in this crate, in
//! small blocks with a SAFETY comment.
#![allow(non_camel_case_types)]
// The exports take raw pointers from C, where `unsafe fn` means nothing; each
// one checks its pointers (NULL) and documents what a non-NULL one must be,
// as rustls-ffi does.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod arith;
pub mod buf;
pub mod decision;
#[cfg(feature = "driver")]
pub mod driver;
#[cfg(feature = "driver")]
pub mod driver_settle;
pub mod error;
mod fork;
pub mod heartbeat;
pub mod journal;
pub mod settlement;
pub mod types;

use std::ffi::c_char;

pub use arith::*;
pub use decision::*;
#[cfg(feature = "driver")]
pub use driver::*;
#[cfg(feature = "driver")]
pub use driver_settle::*;
pub use error::*;
pub use heartbeat::*;
pub use journal::*;
pub use settlement::*;
pub use types::*;

/// The library version as a static NUL-terminated string, e.g. `"0.1.0"`: the
/// version of the library actually loaded, to compare with the header's
/// `LEASEBEAT_VERSION`. Never NULL; do not free.
#[unsafe(no_mangle)]
pub extern "C" fn lb_version() -> *const c_char {
    error::guard_str(
        || concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes(),
        b"unknown\0",
    )
}
