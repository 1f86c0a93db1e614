//! Node.js addon of leasebeat (work in progress).
