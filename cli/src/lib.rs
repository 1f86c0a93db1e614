//! The library half of the `leasebeat` command line: the reference server
//! (`leasebeat serve`), the demo, `leasebeat run`, `leasebeat probe` and `leasebeat simulate`, usable in-process by
//! the integration tests.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod bench;
pub mod demo;
pub mod probe;
pub mod run;
pub mod serve;
pub mod simulate;
