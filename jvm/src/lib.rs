//! JNI library of leasebeat (work in progress).
