//! Python extension of leasebeat (work in progress).
