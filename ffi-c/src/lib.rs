//! C ABI of leasebeat (work in progress).
