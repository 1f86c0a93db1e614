//! Build script of `leasebeat-ffi`: gives `libleasebeat.so` a SONAME on Linux.
//!
//! rustc sets no SONAME on a cdylib, so programs linked against an unversioned
//! `libleasebeat.so` would record that name and load whatever file has it. With
//! a SONAME they record the ABI they were built for instead:
//!
//! - before 1.0, `libleasebeat.so.<major>.<minor>` (here `libleasebeat.so.0.1`):
//!   a 0.x minor release may break the ABI, a patch release may not;
//! - from 1.0 on, `libleasebeat.so.<major>`.
//!
//! `ffi-c/install.sh` reads the SONAME back from the built library and installs
//! `libleasebeat.so.<full version>` with the SONAME and `libleasebeat.so` links.

use std::env;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let major = env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets CARGO_PKG_VERSION_MAJOR");
    let minor = env::var("CARGO_PKG_VERSION_MINOR").expect("cargo sets CARGO_PKG_VERSION_MINOR");
    let soname = if major == "0" {
        format!("libleasebeat.so.{major}.{minor}")
    } else {
        format!("libleasebeat.so.{major}")
    };
    // Applies to the cdylib only (not the staticlib, rlib or tests).
    println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,{soname}");
}
