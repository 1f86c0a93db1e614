//! The driver's monotonic clock.
//!
//! On Linux the driver reads `CLOCK_BOOTTIME` (through `rustix`'s safe
//! `clock_gettime`): a monotonic clock that, unlike `CLOCK_MONOTONIC` (which
//! backs `std::time::Instant` there), keeps counting while the system is
//! suspended. A lease's server-side expiry keeps approaching during a
//! suspend, so the heartbeat's notion of elapsed time must too: after a
//! resume, every beat that fell due during the suspend is seen as due at
//! once (or the retry window as spent) instead of being pushed back by the
//! length of the suspend.
//!
//! Elsewhere it falls back to `std::time::Instant` measured from the first
//! reading in the process (on macOS `Instant` uses `mach_absolute_time`,
//! which stops during sleep; on Windows `QueryPerformanceCounter`, which
//! keeps counting). The choice is reported by [`CLOCK_NAME`].
//!
//! Readings are nanoseconds from an arbitrary origin, shared by every thread
//! of the process, never going backwards.

/// The name of the clock [`now_ns`] reads.
#[cfg(target_os = "linux")]
pub const CLOCK_NAME: &str = "CLOCK_BOOTTIME";
/// The name of the clock [`now_ns`] reads.
#[cfg(not(target_os = "linux"))]
pub const CLOCK_NAME: &str = "std::time::Instant";

/// The current monotonic time in nanoseconds.
#[cfg(target_os = "linux")]
pub fn now_ns() -> u64 {
    use rustix::time::{ClockId, clock_gettime};
    let ts = clock_gettime(ClockId::Boottime);
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// The current monotonic time in nanoseconds.
#[cfg(not(target_os = "linux"))]
pub fn now_ns() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    // Start at 1 s so that 0 is never a reading.
    u64::try_from(origin.elapsed().as_nanos())
        .unwrap_or(u64::MAX)
        .saturating_add(1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic() {
        let a = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = now_ns();
        assert!(b >= a + 1_000_000, "{a} {b}");
    }
}
