//! Fork safety of random keys.
//!
//! UUIDv4 keys come from a per-thread CSPRNG (rand's `ThreadRng`) that is not
//! reseeded by `fork()`: a child would draw the same keys as its parent, and
//! two extensions of different reservations could then carry the same
//! idempotency key. The first heartbeat made with random keys registers a
//! `pthread_atfork` child handler that reseeds the generator from the
//! operating system in the child (the only thread there is the one that
//! forked). C callers need do nothing.

use std::sync::Once;

static REGISTER: Once = Once::new();

extern "C" fn reseed_in_child() {
    // Never unwind out of a C callback. A failed reseed (the OS generator
    // unavailable) keeps the old state; nothing else can be done here.
    let _ = std::panic::catch_unwind(leasebeat::UuidV4Keys::reseed_after_fork);
}

/// Registers the child handler once per process.
pub(crate) fn reseed_random_keys_after_fork() {
    REGISTER.call_once(|| {
        // SAFETY: pthread_atfork only records the handler pointer, a plain
        // `extern "C"` function of this library; glibc's pthread_atfork
        // (libc_nonshared) registers it under this object's __dso_handle,
        // so a dlclose() of the library unregisters it too.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(reseed_in_child)) };
        debug_assert_eq!(rc, 0, "pthread_atfork failed");
    });
}
